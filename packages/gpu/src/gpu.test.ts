import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  BufferUsage,
  createGpu,
  type Gpu,
  GpuError,
  mesaVersion,
  splitWorkgroups,
} from './index.js';

let gpu: Gpu;

beforeAll(async () => {
  gpu = await createGpu();
});

afterAll(() => {
  gpu?.destroy();
});

// y[i] = x[i] * p.scale + p.shift, with p a per-dispatch uniform.
const AXPB = /* wgsl */ `
struct Params { scale: f32, shift: f32, n: u32, _pad: u32 }
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;
override WG: u32 = 64u;
@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  if (gid.x < p.n) { y[gid.x] = x[gid.x] * p.scale + p.shift; }
}`;

function params(scale: number, shift: number, n: number): ArrayBuffer {
  const buf = new ArrayBuffer(16);
  new Float32Array(buf, 0, 2).set([scale, shift]);
  new Uint32Array(buf, 8, 1)[0] = n;
  return buf;
}

describe('createGpu', () => {
  it('reports the adapter, backend, feature level and the limits it requested', () => {
    expect(['vulkan', 'metal', 'd3d12', 'opengles']).toContain(gpu.backend);
    expect(['core', 'compatibility']).toContain(gpu.featureLevel);
    const info = gpu.adapterInfo;
    expect(
      `${info.vendor}${info.architecture}${info.device}${info.description}`.length,
    ).toBeGreaterThan(0);
    if (gpu.backend === 'opengles') {
      expect(gpu.featureLevel).toBe('compatibility');
      expect(process.env.EGL_PLATFORM).toBeDefined();
    }
    if (/llvmpipe/i.test(info.device + info.description)) expect(gpu.isSoftware).toBe(true);
    // The WebGPU default is 256 (128 in compatibility mode); every adapter we target offers more
    // or equal, and the device must carry exactly what was requested.
    expect(gpu.limits.maxComputeInvocationsPerWorkgroup).toBeGreaterThanOrEqual(128);
    for (const [name, value] of Object.entries(gpu.limits)) {
      expect((gpu.device.limits as unknown as Record<string, number>)[name], name).toBe(value);
    }
    expect(gpu.limits.maxStorageBufferBindingSize).toBeGreaterThanOrEqual(128 * 1024 * 1024);
    expect(gpu.describe()).toContain(gpu.backend);
    for (const f of gpu.features) expect(gpu.device.features.has(f as GPUFeatureName)).toBe(true);
    expect(gpu.hasTimestamps).toBe(gpu.device.features.has('timestamp-query'));
  });

  it("reads the Mesa version from the adapter's description, and none from other drivers", () => {
    const of = (description: string, device = '') => mesaVersion({ description, device });
    expect(of('OpenGL version OpenGL ES 3.2 Mesa 22.3.6')).toEqual([22, 3, 6]);
    expect(of('OpenGL version OpenGL ES 3.2 Mesa 25.0.7-2~bpo12+1')).toEqual([25, 0, 7]);
    expect(of('', 'llvmpipe (LLVM 19.1.7, 256 bits) Mesa 24.2')).toEqual([24, 2, 0]);
    expect(of('NVIDIA 580.159')).toBeUndefined();
    expect(of('Mesamorph 1.2.3')).toBeUndefined();
    expect(of('')).toBeUndefined();
    // This machine's adapter: llvmpipe always names its Mesa.
    if (/llvmpipe/i.test(gpu.adapterInfo.device + gpu.adapterInfo.description)) {
      expect(mesaVersion(gpu.adapterInfo)?.[0]).toBeGreaterThanOrEqual(20);
    }
  });

  it('requests the adapter maximum of invocations per workgroup, not the default', async () => {
    const { create } = (await import('webgpu')) as unknown as {
      create: (o: string[]) => GPU;
    };
    const opts = gpu.backend === 'opengles' ? ['backend=opengles'] : [`backend=${gpu.backend}`];
    const adapter = await create(opts).requestAdapter({ featureLevel: gpu.featureLevel });
    expect(adapter).not.toBeNull();
    expect(gpu.limits.maxComputeInvocationsPerWorkgroup).toBe(
      adapter!.limits.maxComputeInvocationsPerWorkgroup,
    );
    expect(gpu.limits.maxComputeWorkgroupStorageSize).toBe(
      adapter!.limits.maxComputeWorkgroupStorageSize,
    );
  });

  it('rejects an unknown backend with INVALID_OPTIONS', async () => {
    const err = await createGpu({ backend: 'cuda' as never }).catch((e: unknown) => e);
    expect(GpuError.isInstance(err)).toBe(true);
    expect((err as GpuError).code).toBe('INVALID_OPTIONS');
    expect((err as GpuError).message).toContain('cuda');
  });

  it('says what to install when a forced backend has no adapter', async () => {
    const missing = process.platform === 'darwin' ? 'd3d12' : 'metal';
    const err = await createGpu({ backend: missing }).catch((e: unknown) => e);
    expect(GpuError.isInstance(err)).toBe(true);
    expect((err as GpuError).code).toBe('NO_ADAPTER');
    expect((err as GpuError).message).toContain('apt-get install libegl1 libegl-dev libgles2');
  });

  it('fails with NO_ADAPTER and advice when no backend works', async () => {
    const fixture = fileURLToPath(new URL('../test/fixtures/no-adapter.ts', import.meta.url));
    const stdout = await new Promise<string>((resolve) => {
      execFile(
        process.execPath,
        ['--import', 'tsx', fixture],
        {
          // A hang detector under the test's own (300 s): a busy machine starts tsx slowly.
          timeout: 240_000,
          cwd: fileURLToPath(new URL('..', import.meta.url)),
          // No Vulkan here is assumed by this test only when the suite itself runs on OpenGL ES.
          env: { ...process.env, EGL_PLATFORM: 'x11', DISPLAY: '' },
        },
        (_error, out) => resolve(out),
      );
    });
    if (gpu.backend !== 'opengles') return; // a machine with a real GPU finds it regardless
    const line = stdout.split('\n').find((l) => l.startsWith('{'));
    expect(line).toBeDefined();
    const result = JSON.parse(line!) as { code: string; message: string };
    expect(result.code).toBe('NO_ADAPTER');
    expect(result.message).toContain('libegl1 libegl-dev libgles2 libegl-mesa0 libgl1-mesa-dri');
    expect(result.message).toContain("EGL_PLATFORM is 'x11'");
  });

  it('rejects an adapter that does not match adapterName', async () => {
    const err = await createGpu({ adapterName: 'no-such-adapter-xyz' }).catch((e: unknown) => e);
    expect((err as GpuError).code).toBe('NO_ADAPTER');
  });
});

describe('createGpu from a provided entry point (the path a browser takes with navigator.gpu)', () => {
  it('takes the adapter from it, trying core then compatibility, and runs a kernel', async () => {
    const { create } = (await import('webgpu')) as unknown as {
      create: (options: string[]) => GPU;
    };
    const native = gpu.backend === 'opengles' ? 'opengles' : gpu.backend;
    const entry = create([`backend=${native}`]);
    const provided = await createGpu({ webgpu: entry });
    try {
      expect(provided.backend).toBe('provided');
      // The same adapter createGpu found itself, at the level that adapter offers.
      expect(provided.adapterInfo.device).toBe(gpu.adapterInfo.device);
      expect(provided.featureLevel).toBe(gpu.featureLevel);
      const n = 100;
      const x = Float32Array.from({ length: n }, (_, i) => i);
      const xb = provided.storageBuffer(x);
      const yb = provided.storageBuffer(n * 4);
      const pipeline = await provided.pipeline({ code: AXPB, label: 'axpb-provided' });
      await provided.runDispatch(
        pipeline,
        [xb, yb, provided.uniformBuffer(params(3, -1, n))],
        Math.ceil(n / 64),
      );
      const y = new Float32Array(await provided.readBuffer(yb));
      for (let i = 0; i < n; i++) expect(y[i]).toBe(x[i]! * 3 - 1);
    } finally {
      provided.destroy();
    }
    const err = await createGpu({ webgpu: entry, adapterName: 'no-such-adapter-xyz' }).catch(
      (e: unknown) => e,
    );
    expect((err as GpuError).code).toBe('NO_ADAPTER');
    expect((err as GpuError).message).toContain('provided WebGPU entry point');
  });
});

describe('buffers', () => {
  it('round-trips typed arrays of any length and offset (property)', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.uint8Array({ minLength: 0, maxLength: 300 }),
        fc.nat(16),
        async (bytes, offsetWords) => {
          const offset = offsetWords * 4;
          const buffer = gpu.storageBuffer(offset + bytes.length + 8);
          gpu.upload(buffer, bytes, offset);
          const back = new Uint8Array(await gpu.readBuffer(buffer, offset, bytes.length));
          gpu.releaseBuffer(buffer);
          expect(back).toEqual(bytes);
        },
      ),
      { numRuns: 25 },
    );
  });

  it('reads back concurrently without mixing results', async () => {
    const buffers = Array.from({ length: 6 }, (_, k) =>
      gpu.storageBuffer(Float32Array.from({ length: 100 + 50 * k }, (_, i) => k * 1000 + i)),
    );
    const all = await Promise.all(buffers.map((b) => gpu.readBuffer(b)));
    all.forEach((bytes, k) => {
      const f = new Float32Array(bytes);
      expect(f.length).toBe(100 + 50 * k);
      expect(f[0]).toBe(k * 1000);
      expect(f[f.length - 1]).toBe(k * 1000 + f.length - 1);
    });
  });

  it('reads back an unaligned sub-range', async () => {
    const data = new Uint8Array(64).map((_, i) => i * 3 + 1);
    const buffer = gpu.storageBuffer(data);
    const back = new Uint8Array(await gpu.readBuffer(buffer, 5, 11));
    expect([...back]).toEqual([...data.subarray(5, 16)]);
  });

  it('creates float buffers from data', async () => {
    const x = Float32Array.from({ length: 1000 }, (_, i) => Math.sin(i) * 1e3);
    const back = new Float32Array(await gpu.readBuffer(gpu.storageBuffer(x)));
    expect(back).toEqual(x);
  });

  it('refuses misaligned offsets, overruns and unreadable buffers', async () => {
    const buffer = gpu.storageBuffer(16);
    expect(() => gpu.upload(buffer, new Uint8Array(4), 2)).toThrow(
      expect.objectContaining({ code: 'INVALID_ARGUMENT' }),
    );
    expect(() => gpu.upload(buffer, new Uint8Array(20))).toThrow(
      expect.objectContaining({ code: 'INVALID_ARGUMENT' }),
    );
    await expect(gpu.readBuffer(buffer, 8, 16)).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    const uniform = gpu.createBuffer({ size: 16, usage: BufferUsage.UNIFORM });
    await expect(gpu.readBuffer(uniform)).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    expect(() => gpu.createBuffer({ size: gpu.limits.maxBufferSize + 4 })).toThrow(
      expect.objectContaining({ code: 'INVALID_ARGUMENT' }),
    );
  });
});

describe('pipelines and dispatch', () => {
  it('runs a compute kernel', async () => {
    const n = 1000;
    const x = Float32Array.from({ length: n }, (_, i) => i - 300);
    const xb = gpu.storageBuffer(x);
    const yb = gpu.storageBuffer(n * 4);
    const pipeline = await gpu.pipeline({ code: AXPB, label: 'axpb' });
    await gpu.runDispatch(
      pipeline,
      [xb, yb, gpu.uniformBuffer(params(2, 0.5, n))],
      Math.ceil(n / 64),
    );
    const y = new Float32Array(await gpu.readBuffer(yb));
    for (let i = 0; i < n; i++) expect(y[i]).toBe(x[i]! * 2 + 0.5);
  });

  it('keeps per-dispatch uniforms distinct within one submission', async () => {
    const n = 100;
    const x = Float32Array.from({ length: n }, (_, i) => i);
    const xb = gpu.storageBuffer(x);
    const outs = Array.from({ length: 40 }, () => gpu.storageBuffer(n * 4));
    const pipeline = await gpu.pipeline({ code: AXPB });
    const encoder = gpu.createEncoder();
    outs.forEach((yb, k) => {
      gpu.dispatch(encoder, pipeline, [xb, yb, gpu.uniforms.alloc(params(k, -k, n))], 2);
    });
    gpu.submit(encoder);
    for (let k = 0; k < outs.length; k++) {
      const y = new Float32Array(await gpu.readBuffer(outs[k]!));
      expect(y[7]).toBe(7 * k - k);
      expect(y[n - 1]).toBe((n - 1) * k - k);
    }
  });

  it('compiles once per source, entry point and constants', async () => {
    const before = gpu.pipelineStats;
    const a = await gpu.pipeline({ code: AXPB, constants: { WG: 32 } });
    const b = await gpu.pipeline({ code: AXPB, constants: { WG: 32 } });
    const c = await gpu.pipeline({ code: AXPB, constants: { WG: 128 } });
    expect(b).toBe(a);
    expect(c).not.toBe(a);
    const after = gpu.pipelineStats;
    expect(after.hits - before.hits).toBe(1);
    expect(after.misses - before.misses).toBe(2);
  });

  it('turns a WGSL compile error into SHADER_COMPILE with the line', async () => {
    const code = '@compute @workgroup_size(1)\nfn main() {\n  let x: u32 = 1.5;\n}\n';
    const err = await gpu.pipeline({ code, label: 'broken' }).catch((e: unknown) => e);
    expect(GpuError.isInstance(err)).toBe(true);
    expect((err as GpuError).code).toBe('SHADER_COMPILE');
    expect((err as GpuError).message).toContain('broken');
    expect((err as GpuError).message).toMatch(/at 3:/);
    // A failed compile is not cached.
    await expect(gpu.pipeline({ code, label: 'broken' })).rejects.toMatchObject({
      code: 'SHADER_COMPILE',
    });
  });

  it('turns a bad entry point into PIPELINE', async () => {
    await expect(gpu.pipeline({ code: AXPB, entryPoint: 'nope' })).rejects.toMatchObject({
      code: 'PIPELINE',
    });
  });

  it('turns a validation error into VALIDATION', async () => {
    const pipeline = await gpu.pipeline({ code: AXPB });
    const xb = gpu.storageBuffer(64);
    // A uniform buffer where a storage buffer is expected is a validation error.
    const wrong = gpu.uniformBuffer(new Float32Array(16));
    const err = await gpu
      .runDispatch(pipeline, [xb, wrong, gpu.uniformBuffer(params(1, 1, 16))], 1)
      .catch((e: unknown) => e);
    expect(GpuError.isInstance(err)).toBe(true);
    expect((err as GpuError).code).toBe('VALIDATION');
    // The device stays usable after a caught validation error.
    const y = gpu.storageBuffer(64);
    await gpu.runDispatch(pipeline, [xb, y, gpu.uniformBuffer(params(1, 3, 16))], 1);
    expect(new Float32Array(await gpu.readBuffer(y))[0]).toBe(3);
  });

  it('rejects a dispatch beyond the per-dimension limit', () => {
    const encoder = gpu.createEncoder();
    expect(() =>
      gpu.dispatch(
        encoder,
        {} as GPUComputePipeline,
        [],
        gpu.limits.maxComputeWorkgroupsPerDimension + 1,
      ),
    ).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
  });

  it('splits large workgroup counts into a grid that covers them', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 10_000_000 }),
        fc.integer({ min: 1, max: 65535 }),
        (n, max) => {
          const [x, y] = splitWorkgroups(n, max);
          expect(x).toBeLessThanOrEqual(max);
          expect(x * y).toBeGreaterThanOrEqual(n);
          expect(x * (y - 1)).toBeLessThan(n);
        },
      ),
    );
  });
});

describe('timing and lifetime', () => {
  it('labels its timing source by the feature present', async () => {
    const pipeline = await gpu.pipeline({ code: AXPB });
    const xb = gpu.storageBuffer(4096);
    const yb = gpu.storageBuffer(4096);
    const p = gpu.uniformBuffer(params(1, 0, 1024));
    const t = await gpu.time((encoder) => gpu.dispatch(encoder, pipeline, [xb, yb, p], 16));
    expect(t.source).toBe(gpu.hasTimestamps ? 'timestamp' : 'wall-clock');
    expect(t.ms).toBeGreaterThanOrEqual(0);
    expect(Number.isFinite(t.ms)).toBe(true);
  });

  it('survives garbage collection while the device is in use', async () => {
    // Dawn aborts the process if the GPU instance is collected under a live device.
    setFlagsFromString('--expose-gc');
    const gc = runInNewContext('gc') as () => void;
    const pipeline = await gpu.pipeline({ code: AXPB });
    gc();
    await new Promise((r) => setTimeout(r, 20));
    gc();
    const x = gpu.storageBuffer(new Float32Array([1, 2, 3, 4]));
    const y = gpu.storageBuffer(16);
    await gpu.runDispatch(pipeline, [x, y, gpu.uniformBuffer(params(3, 1, 4))], 1);
    expect([...new Float32Array(await gpu.readBuffer(y))]).toEqual([4, 7, 10, 13]);
  });

  it('refuses use after destroy', async () => {
    const other = await createGpu();
    other.destroy();
    other.destroy();
    expect(other.destroyed).toBe(true);
    expect(() => other.storageBuffer(4)).toThrow(expect.objectContaining({ code: 'DESTROYED' }));
  });

  it('lets the Node process exit after destroy()', async () => {
    const fixture = fileURLToPath(new URL('../test/fixtures/destroy-exit.ts', import.meta.url));
    const { code, stdout } = await new Promise<{ code: number | null; stdout: string }>(
      (resolve) => {
        const child = execFile(
          process.execPath,
          ['--import', 'tsx', fixture],
          { timeout: 240_000, cwd: fileURLToPath(new URL('..', import.meta.url)) },
          (error, out) =>
            resolve({ code: error ? ((error.code as number) ?? -1) : 0, stdout: out }),
        );
        child.stdin?.end();
      },
    );
    expect(stdout).toContain('destroyed 1,2,3,4');
    expect(code).toBe(0);
  });
});
