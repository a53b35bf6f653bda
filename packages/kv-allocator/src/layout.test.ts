import { describe, expect, it } from 'vitest';
import { KvAllocatorError } from './errors.js';
import { blocksThatFit, kvBytesPerBlock, kvBytesPerToken } from './layout.js';

describe('KV layout arithmetic', () => {
  it('gives the PagedAttention paper figure for OPT-13B: 800 KB per token', () => {
    const opt13b = {
      numLayers: 40,
      numKvHeads: 40,
      headDim: 128,
      blockSize: 16,
      bytesPerElement: 2,
    };
    expect(kvBytesPerToken(opt13b)).toBe(2 * 40 * 40 * 128 * 2);
    expect(kvBytesPerToken(opt13b)).toBe(819_200);
    expect(kvBytesPerBlock(opt13b)).toBe(16 * 819_200);
  });

  it('shrinks by the head ratio for a 70B GQA model (8 KV heads): 320 KiB per token', () => {
    const llama70b = {
      numLayers: 80,
      numKvHeads: 8,
      headDim: 128,
      blockSize: 16,
      bytesPerElement: 2,
    };
    expect(kvBytesPerToken(llama70b)).toBe(320 * 1024);
    const mha = { ...llama70b, numKvHeads: 64 };
    expect(kvBytesPerToken(mha) / kvBytesPerToken(llama70b)).toBe(8);
  });

  it('counts quantization scale bytes', () => {
    // int8 with one f32 scale per token per head: 128 + 4 bytes per head per K or V.
    const int8 = {
      numLayers: 32,
      numKvHeads: 8,
      headDim: 128,
      blockSize: 16,
      bytesPerElement: 1,
      scaleBytesPerTokenHead: 4,
    };
    expect(kvBytesPerToken(int8)).toBe(2 * 32 * 8 * (128 + 4));
    const f16 = { ...int8, bytesPerElement: 2, scaleBytesPerTokenHead: 0 };
    expect(kvBytesPerToken(int8) / kvBytesPerToken(f16)).toBeCloseTo(132 / 256, 10);
    // int4 packs two per byte.
    expect(kvBytesPerToken({ ...int8, bytesPerElement: 0.5, scaleBytesPerTokenHead: 8 })).toBe(
      2 * 32 * 8 * 72,
    );
  });

  it('says how many blocks fit in a memory budget', () => {
    const layout = { numLayers: 2, numKvHeads: 2, headDim: 64, blockSize: 16, bytesPerElement: 2 };
    const perBlock = kvBytesPerBlock(layout);
    expect(blocksThatFit(layout, perBlock * 10 + perBlock - 1)).toBe(10);
  });

  it('rejects malformed layouts with a typed error', () => {
    const good = { numLayers: 2, numKvHeads: 2, headDim: 64, blockSize: 16, bytesPerElement: 2 };
    for (const bad of [
      { ...good, numLayers: 0 },
      { ...good, headDim: 1.5 },
      { ...good, bytesPerElement: -1 },
      { ...good, scaleBytesPerTokenHead: Number.NaN },
    ]) {
      expect(() => kvBytesPerToken(bad)).toThrow(KvAllocatorError);
    }
    expect(() => blocksThatFit(good, -1)).toThrow(/bytes/);
  });
});
