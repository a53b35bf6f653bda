import type { Gpu } from '@kvasir/gpu';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ModelError } from '../errors.js';
import type { CheckpointReader } from '../formats/checkpoint-reader.js';
import { openCheckpoint } from '../formats/open-checkpoint.js';
import { tempCheckpoint, tinyConfig } from '../testing/model.js';
import { modelLimits } from './device-limits.js';
import { wasmPlacement } from './placement.js';

const GIB = 2 ** 30;

/** The header facts the limits read, for sizes no test file should have to hold. */
const headerOnly = (numLayers: number, totalBytes: number) =>
  ({ config: tinyConfig({ numLayers }), totalBytes }) as unknown as CheckpointReader;

describe('modelLimits', () => {
  let ckpt: Awaited<ReturnType<typeof tempCheckpoint>>;
  let reader: CheckpointReader;
  beforeAll(async () => {
    ckpt = await tempCheckpoint(tinyConfig({ numLayers: 3 }), 4);
    reader = await openCheckpoint(ckpt.dir);
  });
  afterAll(async () => {
    await reader?.close();
    await ckpt?.cleanup();
  });

  it('cpu: one host-memory device over every layer, a typed array per layer', async () => {
    expect(await modelLimits(reader, { backend: 'cpu' })).toEqual({
      backend: 'cpu',
      devices: [
        {
          backend: 'cpu',
          description: 'cpu (@kvasir/model reference kernels)',
          hostMemory: true,
          firstLayer: 0,
          numLayers: 3,
          maxKvBytes: 3 * (2 ** 31 - 1),
          maxLayerKvBytes: 2 ** 31 - 1,
          weightBytes: reader.totalBytes,
          memoryBytes: null,
          reservedBytes: 0,
        },
      ],
    });
  });

  it('wasm: what wasm32 leaves after the weights at file size and 256 MiB of activations', async () => {
    const { devices } = await modelLimits(reader, { backend: 'wasm', threads: 3 });
    const kv = 4 * GIB - reader.totalBytes - 256 * 2 ** 20;
    expect(devices).toHaveLength(1);
    expect(devices[0]).toMatchObject({
      backend: 'wasm',
      hostMemory: true,
      firstLayer: 0,
      numLayers: 3,
      maxKvBytes: kv,
      maxLayerKvBytes: Math.floor(kv / 3),
      memoryBytes: 4 * GIB,
      reservedBytes: 256 * 2 ** 20,
    });
    expect(devices[0]?.description).toMatch(
      /^wasm \(3 threads, simd128(, relaxed simd available)?\)$/,
    );
  });

  it('wasm: each layer gets its share, never below zero, whatever the weights weigh', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 1, max: 128 }),
        fc.integer({ min: 0, max: 8 * GIB }),
        async (layers, weights) => {
          const probe = {
            webgpu: null,
            wasm: { simd128: true, threads: true, relaxedSimd: false },
          };
          const [d] = (
            await modelLimits(headerOnly(layers, weights), { backend: 'wasm', threads: 2, probe })
          ).devices;
          // What the app computed itself before the model reported it.
          const app = Math.max(0, Math.floor((4 * GIB - weights - 256 * 2 ** 20) / layers));
          expect(d?.maxLayerKvBytes).toBe(app);
          expect(d?.maxKvBytes).toBeGreaterThanOrEqual(0);
          expect((d?.maxLayerKvBytes ?? 0) * layers).toBeLessThanOrEqual(d?.maxKvBytes ?? 0);
        },
      ),
    );
  });

  it("webgpu: the device's storage binding bounds each layer; its memory is not the host's", async () => {
    const gpu = {
      adapterInfo: { vendor: 'mesa', device: '', description: 'llvmpipe (LLVM 15.0.6, 256 bits)' },
      backend: 'opengles',
      isSoftware: true,
      limits: { maxStorageBufferBindingSize: 128 * 2 ** 20 },
    } as unknown as Gpu;
    expect((await modelLimits(reader, { backend: 'webgpu', gpu })).devices).toEqual([
      {
        backend: 'webgpu',
        description: 'webgpu (mesa llvmpipe (LLVM 15.0.6, 256 bits), opengles, software adapter)',
        hostMemory: false,
        firstLayer: 0,
        numLayers: 3,
        maxKvBytes: 3 * 128 * 2 ** 20,
        maxLayerKvBytes: 128 * 2 ** 20,
        weightBytes: reader.totalBytes,
        memoryBytes: null,
        reservedBytes: 0,
      },
    ]);
  });

  it('split by layer: one device each over its layers, holding its own tensors', async () => {
    const { backend, devices } = await modelLimits(reader, {
      backend: 'cpu',
      threads: 2,
      devices: [{ backend: 'wasm', layers: { firstLayer: 0, numLayers: 1 } }, { backend: 'wasm' }],
    });
    expect(backend).toBe('wasm');
    expect(devices.map((d) => [d.firstLayer, d.numLayers])).toEqual([
      [0, 1],
      [1, 2],
    ]);
    const bytes = (f: (name: string) => boolean) =>
      [...reader.tensors].filter(([n]) => f(n)).reduce((a, [, t]) => a + t.byteLength, 0);
    const layer0 = bytes((n) => n.startsWith('model.layers.0.'));
    // The embedding on the first device; the final norm and the (untied) head on the last.
    const embed = reader.tensor('model.embed_tokens.weight').byteLength;
    expect(devices[0]?.weightBytes).toBe(layer0 + embed);
    expect(devices[1]?.weightBytes).toBe(reader.totalBytes - layer0 - embed);
    for (const d of devices) {
      expect(d.maxKvBytes).toBe(4 * GIB - d.weightBytes - 256 * 2 ** 20);
    }
  });

  it('wasm with a smaller memory: its budget is that memory, and the split packs into it', async () => {
    const memory = 256 * 2 ** 20 + Math.ceil(reader.totalBytes * 0.75);
    const perLayer = 4096;
    const devices = wasmPlacement(reader, { kvBytesPerLayer: perLayer, wasmMemoryBytes: memory });
    expect(devices.length).toBeGreaterThan(1);
    const limits = await modelLimits(reader, {
      backend: 'wasm',
      threads: 1,
      devices,
      wasmMemoryBytes: memory,
    });
    for (const d of limits.devices) {
      expect(d.memoryBytes).toBe(memory);
      expect(d.maxKvBytes).toBe(memory - d.weightBytes - 256 * 2 ** 20);
      expect(d.maxKvBytes).toBeGreaterThanOrEqual(perLayer * d.numLayers);
    }
    for (const bad of [0, 2 ** 32 + 1, 1.5]) {
      await expect(modelLimits(reader, { backend: 'wasm', wasmMemoryBytes: bad })).rejects.toThrow(
        /a WebAssembly memory holds between 1 byte and 4 GiB/,
      );
    }
  });

  it('webgpu without the device it will run on is refused by name', async () => {
    const e = await modelLimits(reader, { backend: 'webgpu' }).catch((x: unknown) => x);
    expect(ModelError.isInstance(e) && e.code).toBe('INVALID_ARGUMENT');
    expect((e as Error).message).toMatch(/gpu/);
  });
});
