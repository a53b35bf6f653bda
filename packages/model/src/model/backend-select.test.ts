import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { seqPlan, tempCheckpoint, tinyConfig } from '../testing/model.js';
import { probeBackends, selectBackend } from './backend-select.js';
import { loadModel } from './model.js';

// A machine with no WebGPU adapter at all: device acquisition fails the way @kvasir/gpu does.
vi.mock('@kvasir/gpu', async (importOriginal) => {
  const real = await importOriginal<typeof import('@kvasir/gpu')>();
  return {
    ...real,
    createGpu: async () => {
      throw new real.GpuError('NO_ADAPTER', 'No WebGPU adapter found (mocked).');
    },
  };
});

describe('backend selection without an adapter', () => {
  let ckpt: Awaited<ReturnType<typeof tempCheckpoint>>;
  beforeAll(async () => {
    ckpt = await tempCheckpoint(tinyConfig(), 5);
  });
  afterAll(() => ckpt?.cleanup());

  it("'auto' falls back to the wasm backend and runs", async () => {
    const m = await loadModel(ckpt.dir, { numBlocks: 4, blockSize: 16, threads: 2 });
    expect(m.backend).toBe('wasm');
    const logits = await m.forward(seqPlan([1, 2, 3], 0, [0], 16, 'last'));
    expect(logits.length).toBe(272);
    expect(logits.every(Number.isFinite)).toBe(true);
    await m.destroy();
  });

  it("'webgpu' refuses with BACKEND, carrying the device error", async () => {
    await expect(loadModel(ckpt.dir, { numBlocks: 4, backend: 'webgpu' })).rejects.toMatchObject({
      code: 'BACKEND',
      cause: { code: 'NO_ADAPTER' },
    });
  });

  it('bad options are refused by name before anything loads', async () => {
    await expect(
      loadModel(ckpt.dir, { numBlocks: 4, backend: 'tpu' as never }),
    ).rejects.toMatchObject({
      code: 'INVALID_ARGUMENT',
    });
    await expect(loadModel(ckpt.dir, { numBlocks: 0, backend: 'cpu' })).rejects.toMatchObject({
      code: 'INVALID_ARGUMENT',
    });
    await expect(
      loadModel(ckpt.dir, { numBlocks: 4, backend: 'cpu', kvFormat: 'int3' as never }),
    ).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
  });
});

describe('selectBackend: the one rule for auto', () => {
  const hardware = { isSoftware: false };
  const software = { isSoftware: true };
  const wasm = { simd128: true, threads: true, relaxedSimd: false };
  const noThreads = { simd128: true, threads: false, relaxedSimd: false };
  it.each([
    ['auto', hardware, wasm, 'webgpu'],
    ['auto', software, wasm, 'wasm'],
    ['auto', null, wasm, 'wasm'],
    ['auto', software, noThreads, 'cpu'],
    ['auto', null, noThreads, 'cpu'],
    ['webgpu', software, wasm, 'webgpu'],
    ['wasm', hardware, wasm, 'wasm'],
    ['cpu', hardware, wasm, 'cpu'],
  ] as const)('%s with adapter %o and wasm %o runs on %s', (choice, webgpu, w, want) => {
    expect(selectBackend(choice, { webgpu, wasm: w })).toBe(want);
  });

  it('refuses a named backend the probe did not find, and names that are no backend', () => {
    expect(() => selectBackend('webgpu', { webgpu: null, wasm })).toThrow(
      expect.objectContaining({ code: 'BACKEND' }),
    );
    expect(() => selectBackend('wasm', { webgpu: null, wasm: noThreads })).toThrow(
      expect.objectContaining({ code: 'BACKEND' }),
    );
    expect(() => selectBackend('tpu' as never, { webgpu: null, wasm })).toThrow(
      expect.objectContaining({ code: 'INVALID_ARGUMENT' }),
    );
  });
});

describe('probeBackends', () => {
  it("takes the caller's WebGPU finding as is, and reports this runtime's WebAssembly", async () => {
    const probe = await probeBackends({ webgpu: { isSoftware: true } });
    expect(probe.webgpu).toEqual({ isSoftware: true });
    // Node 20 has both; the wasm backend's tests run on them.
    expect(probe.wasm).toMatchObject({ simd128: true, threads: true });
    expect(typeof probe.wasm.relaxedSimd).toBe('boolean');
  });

  it('without a finding, probes WebGPU here: no adapter on this (mocked) machine', async () => {
    expect((await probeBackends()).webgpu).toBeNull();
  });
});
