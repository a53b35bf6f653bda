import { seededRandom } from '@kvasir/test-utils';
import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import { f16Format, f32Format } from '../kv-format/float.js';
import { kvCacheLayout } from '../layout.js';
import { releaseTestGpu, testGpu } from '../testing/gpu.js';
import { randomCache, shuffledRange } from '../testing/random.js';
import { CopyBlocks } from './copy-blocks.js';
import { copyBlocksReference } from './copy-blocks-reference.js';

afterAll(releaseTestGpu);

describe('copyBlocksReference', () => {
  it('copies exactly the listed blocks', () => {
    const cache = Uint32Array.from({ length: 5 * 8 }, (_, i) => i);
    copyBlocksReference(cache, 8, [
      [0, 3],
      [4, 1],
    ]);
    for (let b = 0; b < 5; b++) {
      const from = b === 3 ? 0 : b === 1 ? 4 : b;
      for (let w = 0; w < 8; w++) expect(cache[b * 8 + w]).toBe(from * 8 + w);
    }
  });

  it('rejects out-of-range ids, duplicate destinations and chained copies', () => {
    const cache = new Uint32Array(4 * 8);
    expect(() => copyBlocksReference(cache, 8, [[0, 4]])).toThrow(
      expect.objectContaining({ code: 'BLOCK_OUT_OF_RANGE' }),
    );
    expect(() => copyBlocksReference(cache, 8, [[-1, 2]])).toThrow(
      expect.objectContaining({ code: 'BLOCK_OUT_OF_RANGE' }),
    );
    expect(() =>
      copyBlocksReference(cache, 8, [
        [0, 2],
        [1, 2],
      ]),
    ).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
    expect(() =>
      copyBlocksReference(cache, 8, [
        [0, 1],
        [1, 2],
      ]),
    ).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
    expect(() => copyBlocksReference(cache, 8, new Uint32Array([1, 2, 3]))).toThrow(
      expect.objectContaining({ code: 'SHAPE_MISMATCH' }),
    );
  });
});

describe('CopyBlocks on the GPU', () => {
  for (const [format, blockSize, headDim, heads] of [
    [f32Format, 8, 64, 2],
    [f16Format, 16, 128, 1],
    [f16Format, 32, 80, 3],
  ] as const) {
    it(`matches the reference: ${format.name} B=${blockSize} D=${headDim} H=${heads}`, async () => {
      const gpu = await testGpu();
      const config = { format, blockSize, headDim, numKvHeads: heads };
      const layout = kvCacheLayout(config);
      const rng = seededRandom(blockSize);
      const numBlocks = 9;
      const cache = randomCache(rng, layout, numBlocks);
      const order = shuffledRange(rng, numBlocks);
      const pairs: [number, number][] = [
        [order[0]!, order[1]!],
        [order[2]!, order[3]!],
        [order[2]!, order[4]!],
        [order[5]!, order[6]!],
      ];
      const copier = await CopyBlocks.create(gpu, config);
      const kvCache = gpu.storageBuffer(cache);
      await copier.run({ kvCache, pairs });
      copyBlocksReference(cache, layout.blockWords, pairs);
      expect(new Uint32Array(await gpu.readBuffer(kvCache))).toEqual(cache);
    });
  }

  it('handles more pairs than one dispatch carries, and copies into another buffer', async () => {
    const gpu = await testGpu();
    const config = { format: f16Format, blockSize: 8, headDim: 64, numKvHeads: 1 };
    const layout = kvCacheLayout(config);
    const rng = seededRandom(99);
    const numBlocks = 400;
    const cache = randomCache(rng, layout, numBlocks);
    const order = shuffledRange(rng, numBlocks);
    const pairs = Array.from(
      { length: 200 },
      (_, i) => [order[i]!, order[200 + i]!] as [number, number],
    );
    const copier = await CopyBlocks.create(gpu, config);
    const kvCache = gpu.storageBuffer(cache);
    const staging = gpu.storageBuffer(4 * layout.bytesPerBlock);
    const encoder = gpu.createEncoder();
    copier.encode(encoder, { kvCache, pairs });
    copier.encode(encoder, {
      kvCache,
      pairs: [
        [order[0]!, 3],
        [order[1]!, 0],
      ],
      dstCache: staging,
    });
    gpu.submit(encoder);
    const want = cache.slice();
    copyBlocksReference(want, layout.blockWords, pairs);
    expect(new Uint32Array(await gpu.readBuffer(kvCache))).toEqual(want);
    const staged = new Uint32Array(await gpu.readBuffer(staging));
    const bw = layout.blockWords;
    expect(staged.subarray(3 * bw, 4 * bw)).toEqual(
      want.subarray(order[0]! * bw, (order[0]! + 1) * bw),
    );
    expect(staged.subarray(0, bw)).toEqual(want.subarray(order[1]! * bw, (order[1]! + 1) * bw));
  });

  it('copies any valid pair set like the reference (property)', async () => {
    const gpu = await testGpu();
    const config = { format: f32Format, blockSize: 8, headDim: 64, numKvHeads: 1 };
    const layout = kvCacheLayout(config);
    const copier = await CopyBlocks.create(gpu, config);
    await fc.assert(
      fc.asyncProperty(fc.integer(), fc.integer({ min: 0, max: 6 }), async (seed, n) => {
        const rng = seededRandom(seed);
        const numBlocks = 12;
        const cache = randomCache(rng, layout, numBlocks);
        const order = shuffledRange(rng, numBlocks);
        const pairs = Array.from(
          { length: n },
          (_, i) => [order[i]!, order[6 + i]!] as [number, number],
        );
        const kvCache = gpu.storageBuffer(cache);
        await copier.run({ kvCache, pairs });
        copyBlocksReference(cache, layout.blockWords, pairs);
        expect(new Uint32Array(await gpu.readBuffer(kvCache))).toEqual(cache);
        gpu.releaseBuffer(kvCache);
      }),
      { numRuns: 10 },
    );
  });

  it('rejects bad pairs before encoding', async () => {
    const gpu = await testGpu();
    const copier = await CopyBlocks.create(gpu, {
      format: f32Format,
      blockSize: 8,
      headDim: 64,
      numKvHeads: 1,
    });
    const kvCache = gpu.storageBuffer(3 * copier.layout.bytesPerBlock);
    const encoder = gpu.createEncoder();
    expect(() => copier.encode(encoder, { kvCache, pairs: [[0, 3]] })).toThrow(
      expect.objectContaining({ code: 'BLOCK_OUT_OF_RANGE' }),
    );
    expect(() =>
      copier.encode(encoder, {
        kvCache,
        pairs: [
          [0, 1],
          [1, 2],
        ],
      }),
    ).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
    expect(() => copier.encode(encoder, { kvCache: gpu.storageBuffer(16), pairs: [] })).toThrow(
      expect.objectContaining({ code: 'SHAPE_MISMATCH' }),
    );
    encoder.finish();
  });
});
