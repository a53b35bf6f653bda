import { randomFloats, seededRandom } from '@kvasir/test-utils';
import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import { AttentionKernelError } from '../errors.js';
import { f16Format, f32Format } from '../kv-format/float.js';
import type { KvFormat, KvWgslOptions } from '../kv-format/types.js';
import { kRowOffset, kvCacheLayout, vRowOffset } from '../layout.js';
import { releaseTestGpu, testGpu } from '../testing/gpu.js';
import { randomCache, randomSlotMapping } from '../testing/random.js';
import { WriteKvCache } from './write-kv-cache.js';
import { writeKvCacheReference } from './write-kv-cache-reference.js';

afterAll(releaseTestGpu);

interface Case {
  format: KvFormat;
  numKvHeads: number;
  headDim: number;
  blockSize: number;
  numBlocks: number;
  numTokens: number;
  skipRate: number;
}

const cases: Case[] = [
  {
    format: f32Format,
    numKvHeads: 1,
    headDim: 64,
    blockSize: 8,
    numBlocks: 5,
    numTokens: 37,
    skipRate: 0,
  },
  {
    format: f16Format,
    numKvHeads: 2,
    headDim: 80,
    blockSize: 16,
    numBlocks: 4,
    numTokens: 29,
    skipRate: 0.2,
  },
  {
    format: f32Format,
    numKvHeads: 4,
    headDim: 96,
    blockSize: 32,
    numBlocks: 3,
    numTokens: 50,
    skipRate: 0.1,
  },
  {
    format: f16Format,
    numKvHeads: 3,
    headDim: 128,
    blockSize: 8,
    numBlocks: 6,
    numTokens: 45,
    skipRate: 0,
  },
  {
    format: f16Format,
    numKvHeads: 1,
    headDim: 64,
    blockSize: 32,
    numBlocks: 2,
    numTokens: 7,
    skipRate: 0.5,
  },
];

describe('writeKvCacheReference', () => {
  it('puts each row where the layout says, and nothing else', () => {
    const rng = seededRandom(3);
    const layout = kvCacheLayout({ numKvHeads: 2, headDim: 8, blockSize: 4, format: f32Format });
    const cache = new Uint32Array(3 * layout.blockWords);
    const key = randomFloats(rng, 2 * 2 * 8);
    const value = randomFloats(rng, 2 * 2 * 8);
    writeKvCacheReference(layout, cache, key, value, new Int32Array([9, -1]));
    const f = new Float32Array(cache.buffer);
    // Token 0 → block 2, offset 1, checked with the naive offset formula of the contract.
    for (let h = 0; h < 2; h++) {
      for (let i = 0; i < 8; i++) {
        const k = 2 * layout.blockWords + 2 * h * layout.slabWords + 1 * 8 + i;
        expect(f[k]).toBe(key[h * 8 + i]);
        expect(f[k + layout.slabWords]).toBe(value[h * 8 + i]);
        expect(kRowOffset(layout, 2, h, 1) + i).toBe(k);
        expect(vRowOffset(layout, 2, h, 1) + i).toBe(k + layout.slabWords);
      }
    }
    const nonZero = [...f].filter((x) => x !== 0).length;
    expect(nonZero).toBe(2 * 2 * 8);
  });

  it('rejects bad slots without writing', () => {
    const layout = kvCacheLayout({ numKvHeads: 1, headDim: 8, blockSize: 4, format: f32Format });
    const cache = new Uint32Array(2 * layout.blockWords);
    const rows = new Float32Array(2 * 8).fill(1);
    for (const slots of [
      [0, 8],
      [0, -2],
      [3, 3],
    ]) {
      expect(() => writeKvCacheReference(layout, cache, rows, rows, new Int32Array(slots))).toThrow(
        AttentionKernelError,
      );
    }
    expect(cache.every((w) => w === 0)).toBe(true);
  });
});

describe('WriteKvCache on the GPU', () => {
  for (const c of cases) {
    it(`matches the CPU reference word for word: ${c.format.name} H=${c.numKvHeads} D=${c.headDim} B=${c.blockSize} tokens=${c.numTokens}`, async () => {
      const gpu = await testGpu();
      const rng = seededRandom(c.headDim * 31 + c.blockSize);
      const layout = kvCacheLayout(c);
      const cache = randomCache(rng, layout, c.numBlocks);
      const n = c.numTokens * c.numKvHeads * c.headDim;
      const key = randomFloats(rng, n, 4);
      const value = randomFloats(rng, n, 4);
      // Shuffled slots over the whole cache: partial and non-contiguous blocks, some skipped.
      const slots = randomSlotMapping(rng, c.numTokens, c.numBlocks, c.blockSize, c.skipRate);
      const writer = await WriteKvCache.create(gpu, c);
      const kvCache = gpu.storageBuffer(cache);
      await writer.run({
        key: gpu.storageBuffer(key),
        value: gpu.storageBuffer(value),
        slotMapping: gpu.storageBuffer(slots),
        kvCache,
        numTokens: c.numTokens,
        slotMappingHost: slots,
      });
      const want = cache.slice();
      writeKvCacheReference(layout, want, key, value, slots);
      const got = new Uint32Array(await gpu.readBuffer(kvCache));
      // Tolerance: none. Both sides encode with the same bit-exact codec.
      expect(got).toEqual(want);
    });
  }

  it('writes any slot mapping like the reference (property, f16)', async () => {
    const gpu = await testGpu();
    const config = { numKvHeads: 2, headDim: 64, blockSize: 8, format: f16Format };
    const layout = kvCacheLayout(config);
    const writer = await WriteKvCache.create(gpu, config);
    const numBlocks = 3;
    await fc.assert(
      fc.asyncProperty(fc.integer({ min: 0, max: 24 }), fc.integer(), async (numTokens, seed) => {
        const rng = seededRandom(seed);
        const cache = randomCache(rng, layout, numBlocks);
        const key = randomFloats(rng, numTokens * 2 * 64);
        const value = randomFloats(rng, numTokens * 2 * 64);
        const slots = randomSlotMapping(rng, numTokens, numBlocks, 8, 0.3);
        const kvCache = gpu.storageBuffer(cache);
        await writer.run({
          key: gpu.storageBuffer(Math.max(4, key.byteLength)),
          value: gpu.storageBuffer(Math.max(4, value.byteLength)),
          slotMapping: gpu.storageBuffer(Math.max(4, slots.byteLength)),
          kvCache,
          numTokens: 0,
        });
        const k = gpu.storageBuffer(key.length > 0 ? key : new Float32Array(1));
        const v = gpu.storageBuffer(value.length > 0 ? value : new Float32Array(1));
        const s = gpu.storageBuffer(slots.length > 0 ? slots : new Int32Array(1));
        await writer.run({
          key: k,
          value: v,
          slotMapping: s,
          kvCache,
          numTokens,
          slotMappingHost: slots,
        });
        const want = cache.slice();
        writeKvCacheReference(layout, want, key, value, slots);
        expect(new Uint32Array(await gpu.readBuffer(kvCache))).toEqual(want);
        for (const b of [k, v, s, kvCache]) gpu.releaseBuffer(b);
      }),
      { numRuns: 8 },
    );
  });

  it('rejects bad input before encoding anything', async () => {
    const gpu = await testGpu();
    const config = { numKvHeads: 2, headDim: 64, blockSize: 16, format: f32Format };
    const writer = await WriteKvCache.create(gpu, config);
    const rows = gpu.storageBuffer(4 * 2 * 64 * 4);
    const slots = gpu.storageBuffer(16);
    const kvCache = gpu.storageBuffer(2 * writer.layout.bytesPerBlock);
    const encoder = gpu.createEncoder();
    const base = { key: rows, value: rows, slotMapping: slots, kvCache, numTokens: 4 };
    const code = (f: () => void): string | undefined => {
      try {
        f();
      } catch (e) {
        return AttentionKernelError.isInstance(e) ? e.code : String(e);
      }
      return undefined;
    };
    expect(code(() => writer.encode(encoder, { ...base, numTokens: 5 }))).toBe('SHAPE_MISMATCH');
    expect(code(() => writer.encode(encoder, { ...base, kvCache: gpu.storageBuffer(64) }))).toBe(
      'SHAPE_MISMATCH',
    );
    expect(
      code(() =>
        writer.encode(encoder, { ...base, slotMappingHost: new Int32Array([0, 1, 32, 2]) }),
      ),
    ).toBe('SLOT_OUT_OF_RANGE');
    expect(
      code(() =>
        writer.encode(encoder, { ...base, slotMappingHost: new Int32Array([0, 1, 1, 2]) }),
      ),
    ).toBe('INVALID_ARGUMENT');
    expect(
      code(() => writer.encode(encoder, { ...base, slotMappingHost: new Int32Array([0, 1]) })),
    ).toBe('SHAPE_MISMATCH');
    expect(code(() => writer.encode(encoder, { ...base, numTokens: -1 }))).toBe('INVALID_ARGUMENT');
    await expect(WriteKvCache.create(gpu, { ...config, headDim: 100 })).rejects.toMatchObject({
      code: 'UNSUPPORTED_HEAD_DIM',
    });
    encoder.finish();
  });

  it('skips out-of-range slots on the GPU even without a host copy', async () => {
    const gpu = await testGpu();
    const config = { numKvHeads: 1, headDim: 64, blockSize: 8, format: f32Format };
    const writer = await WriteKvCache.create(gpu, config);
    const rng = seededRandom(5);
    const cache = randomCache(rng, writer.layout, 2);
    const kvCache = gpu.storageBuffer(cache);
    const rows = gpu.storageBuffer(randomFloats(rng, 2 * 64));
    await writer.run({
      key: rows,
      value: rows,
      slotMapping: gpu.storageBuffer(new Int32Array([16, 1_000_000])),
      kvCache,
      numTokens: 2,
    });
    expect(new Uint32Array(await gpu.readBuffer(kvCache))).toEqual(cache);
  });
});

/**
 * A test-only scaled format: rows stay f32, and each row's absmax is stored at the end of the
 * slab, exercising the writer's reduction and scale path the way int8 / fp8 formats use it.
 */
const absmaxFormat: KvFormat = {
  ...f32Format,
  name: 'test-absmax',
  rowScaled: true,
  scaleWordsPerSlab: (blockSize) => Math.ceil(blockSize / 4) * 4,
  wgslStore(o: KvWgslOptions) {
    const v = o.cacheVar ?? 'kv';
    return `
const KV_STORE_CHUNK: u32 = 4u;
fn kv_row_scale(absmax: f32) -> f32 { return absmax; }
fn kv_store_scale(slab: u32, t: u32, scale: f32) { ${v}[slab + ${o.blockSize * o.headDim}u + t] = bitcast<u32>(scale); }
fn kv_store_chunk(slab: u32, t: u32, c: u32, scale: f32) {
  for (var j = 0u; j < 4u; j++) { ${v}[slab + t * ${o.headDim}u + 4u * c + j] = bitcast<u32>(kv_src(4u * c + j)); }
}`;
  },
  encodeRow(cache, slabStart, t, row, blockSize) {
    f32Format.encodeRow(cache, slabStart, t, row, blockSize);
    let m = 0;
    for (const x of row) if (Math.abs(x) < 3e38) m = Math.max(m, Math.abs(x));
    new Float32Array(cache.buffer, cache.byteOffset, cache.length)[
      slabStart + blockSize * row.length + t
    ] = m;
  },
};

describe('WriteKvCache with a row-scaled format', () => {
  it('reduces each row absmax and stores it with the row', async () => {
    const gpu = await testGpu();
    const config = { numKvHeads: 2, headDim: 128, blockSize: 8, format: absmaxFormat };
    const layout = kvCacheLayout(config);
    expect(layout.slabWords).toBe(8 * 128 + 8);
    const rng = seededRandom(21);
    const numBlocks = 3;
    const cache = randomCache(rng, layout, numBlocks);
    const numTokens = 11;
    const key = randomFloats(rng, numTokens * 2 * 128, 5);
    const value = randomFloats(rng, numTokens * 2 * 128, 5);
    key[77] = 40; // an outlier channel sets its row's scale
    value[300] = Number.POSITIVE_INFINITY; // an infinity does not
    const slots = randomSlotMapping(rng, numTokens, numBlocks, 8, 0.1);
    const writer = await WriteKvCache.create(gpu, config);
    const kvCache = gpu.storageBuffer(cache);
    await writer.run({
      key: gpu.storageBuffer(key),
      value: gpu.storageBuffer(value),
      slotMapping: gpu.storageBuffer(slots),
      kvCache,
      numTokens,
    });
    writeKvCacheReference(layout, cache, key, value, slots);
    expect(new Uint32Array(await gpu.readBuffer(kvCache))).toEqual(cache);
  });
});
