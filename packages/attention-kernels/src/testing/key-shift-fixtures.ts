import { randomFloats, type SeededRandom } from '@kvasir/test-utils';
import { f16Format, f32Format } from '../kv-format/float.js';
import { fp8StaticKvFormat } from '../kv-format/fp8-static.js';
import { QUANTIZED_KV_FORMATS } from '../kv-format/registry.js';
import type { KvFormat } from '../kv-format/types.js';
import type { KvCacheLayout } from '../layout.js';
import { applyRopeReference, type RopeTables } from '../rope/rope-reference.js';
import type { KeyShiftConfig } from '../rope/shift-keys-reference.js';

/** Every KV format a key shift must handle: the float ones, the quantized ones, a static fp8. */
export const KEY_SHIFT_FORMATS: readonly KvFormat[] = [
  f32Format,
  f16Format,
  ...QUANTIZED_KV_FORMATS,
  fp8StaticKvFormat('fp8-e4m3', { keyScale: 1 / 256, valueScale: 1 / 128 }),
];

/**
 * Random f32 keys `[numBlocks][numKvHeads][blockSize][headDim]` (the tokens of block `b` at
 * positions `start + b * blockSize + t`) and V rows, rotated to those positions and encoded into
 * a cache. Returns the cache and the unrotated keys, so a test can re-rotate them anywhere.
 */
export function keysAtPositions(
  rng: SeededRandom,
  config: KeyShiftConfig,
  layout: KvCacheLayout,
  tables: RopeTables,
  numBlocks: number,
  start: (block: number) => number,
): { cache: Uint32Array; raw: Float32Array } {
  const { headDim: D, blockSize: B, numKvHeads: H, format } = layout;
  const raw = randomFloats(rng, numBlocks * H * B * D, 1);
  const cache = writeKeys(config, layout, tables, raw, numBlocks, start);
  for (let b = 0; b < numBlocks; b++) {
    for (let h = 0; h < H; h++) {
      const slab = b * layout.blockWords + (2 * h + 1) * layout.slabWords;
      for (let t = 0; t < B; t++) format.encodeRow(cache, slab, t, randomFloats(rng, D, 1), B);
    }
  }
  return { cache, raw };
}

/**
 * A cache (V rows zero) whose K rows are `raw` rotated to `start(block) + t` and encoded: what
 * a model would have written at those positions.
 */
export function writeKeys(
  config: KeyShiftConfig,
  layout: KvCacheLayout,
  tables: RopeTables,
  raw: Float32Array,
  numBlocks: number,
  start: (block: number) => number,
): Uint32Array {
  const { headDim: D, blockSize: B, numKvHeads: H, format } = layout;
  const cache = new Uint32Array(numBlocks * layout.blockWords);
  const q = new Float32Array(D);
  const ropeOneHead = { ...config.rope, numQHeads: 1, numKvHeads: 1 };
  for (let b = 0; b < numBlocks; b++) {
    for (let h = 0; h < H; h++) {
      const slab = b * layout.blockWords + 2 * h * layout.slabWords;
      for (let t = 0; t < B; t++) {
        const off = ((b * H + h) * B + t) * D;
        const k = raw.slice(off, off + D);
        applyRopeReference(ropeOneHead, tables, q, k, Uint32Array.of(start(b) + t));
        format.encodeRow(cache, slab, t, k, B);
      }
    }
  }
  return cache;
}

/** Every K row of the cache decoded to f32, `[blocks][heads][blockSize][headDim]`. */
export function decodeKeys(layout: KvCacheLayout, cache: Uint32Array): Float32Array {
  const { headDim: D, blockSize: B, numKvHeads: H, format } = layout;
  const numBlocks = cache.length / layout.blockWords;
  const out = new Float32Array(numBlocks * H * B * D);
  for (let b = 0; b < numBlocks; b++) {
    for (let h = 0; h < H; h++) {
      const slab = b * layout.blockWords + 2 * h * layout.slabWords;
      for (let t = 0; t < B; t++) {
        format.decodeRow(cache, slab, t, out.subarray(((b * H + h) * B + t) * D).subarray(0, D), B);
      }
    }
  }
  return out;
}
