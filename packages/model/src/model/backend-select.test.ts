import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { seqPlan, tempCheckpoint, tinyConfig } from '../testing/model.js';
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
