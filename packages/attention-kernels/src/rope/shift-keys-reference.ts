import { AttentionKernelError } from '../errors.js';
import { type KvCacheConfig, type KvCacheLayout, kvCacheLayout } from '../layout.js';
import { checkRopeConfig, type RopeConfig, type RopeTables, ropePair } from './rope-reference.js';

/** What fixes a key shift: the cache's layout and the model's RoPE. */
export interface KeyShiftConfig extends KvCacheConfig {
  /**
   * The RoPE the keys were rotated with (style, rotary dim, theta, scaling, frequency factors);
   * its `numKvHeads` and `headDim` must be the cache's, and shifts must stay below its
   * `maxPosition` (the size of its tables).
   */
  readonly rope: RopeConfig;
}

/** One physical block whose keys move by `delta` positions. */
export interface KeyShift {
  /** Physical block id. */
  readonly block: number;
  /** Positions to move by: a nonzero integer with `|delta| < rope.maxPosition`. */
  readonly delta: number;
}

/**
 * Check a key-shift configuration against its tables and return the cache layout.
 *
 * @throws {AttentionKernelError} `INVALID_ARGUMENT` for a RoPE config that disagrees with the
 *   cache or tables of another config, as {@link kvCacheLayout} and `checkRopeConfig` otherwise.
 */
export function checkKeyShiftConfig(config: KeyShiftConfig, tables?: RopeTables): KvCacheLayout {
  const layout = kvCacheLayout(config);
  const rot = checkRopeConfig(config.rope);
  if (config.rope.numKvHeads !== config.numKvHeads || config.rope.headDim !== config.headDim) {
    throw new AttentionKernelError(
      'INVALID_ARGUMENT',
      `rope has ${config.rope.numKvHeads} KV heads of dim ${config.rope.headDim}; the cache has ${config.numKvHeads} of dim ${config.headDim}.`,
    );
  }
  if (
    tables !== undefined &&
    (tables.half !== rot / 2 || tables.cos.length !== config.rope.maxPosition * tables.half)
  ) {
    throw new AttentionKernelError(
      'SHAPE_MISMATCH',
      `RoPE tables of ${tables.cos.length} entries (half ${tables.half}) are not ropeTables(config.rope): ${config.rope.maxPosition} positions of ${rot / 2} pairs.`,
    );
  }
  return layout;
}

/**
 * Check shifts against a cache of `numBlocks` blocks: ids inside it, each block once, deltas
 * nonzero integers below `maxPosition` in magnitude.
 *
 * @throws {AttentionKernelError} `BLOCK_OUT_OF_RANGE` or `INVALID_ARGUMENT` naming the shift.
 */
export function checkKeyShifts(
  shifts: readonly KeyShift[],
  numBlocks: number,
  maxPosition: number,
): void {
  const seen = new Set<number>();
  for (const [i, { block, delta }] of shifts.entries()) {
    if (!(Number.isInteger(block) && block >= 0 && block < numBlocks)) {
      throw new AttentionKernelError(
        'BLOCK_OUT_OF_RANGE',
        `shifts[${i}]: block ${block} is outside the cache's ${numBlocks} blocks.`,
        { details: { index: i, block, numBlocks } },
      );
    }
    if (!(Number.isInteger(delta) && delta !== 0 && Math.abs(delta) < maxPosition)) {
      throw new AttentionKernelError(
        'INVALID_ARGUMENT',
        `shifts[${i}]: delta ${delta} must be a nonzero integer with |delta| < maxPosition ${maxPosition}.`,
        { details: { index: i, delta, maxPosition } },
      );
    }
    if (seen.has(block)) {
      throw new AttentionKernelError(
        'INVALID_ARGUMENT',
        `shifts[${i}]: block ${block} is listed twice.`,
        { details: { index: i, block } },
      );
    }
    seen.add(block);
  }
}

const fr = Math.fround;

/**
 * Re-rotates the keys of whole physical blocks by RoPE, in place, in the cache's own format:
 * every K row of every KV head and every slot of each listed block is decoded to f32, rotated
 * by `R(delta)` (so keys written at position `p` become keys at `p + delta`, up to rounding)
 * and encoded back with the format's encoder (scales recomputed). V rows and other blocks are
 * untouched. This is what StreamingLLM-style compression needs after dropping cached tokens:
 * the kept keys move back to their new places in the cache.
 *
 * The f32 operations are those of {@link applyRopeReference} (`x0·c − x1·s`, `x1·c + x0·s`) with
 * the tables' entry at `|delta|`, the sine negated for a negative delta; the WGSL `ShiftKeys`
 * kernel does the same. Works on any `Uint32Array` view of a layer's cache (the `wasm`
 * backend calls it on its memory).
 *
 * @param tables `ropeTables(config.rope)`.
 * @throws {AttentionKernelError} `BLOCK_OUT_OF_RANGE`, `INVALID_ARGUMENT`, `SHAPE_MISMATCH`
 *   (cache not whole blocks, tables not the config's); nothing is modified then.
 */
export function shiftKeysReference(
  config: KeyShiftConfig,
  tables: RopeTables,
  cache: Uint32Array,
  shifts: readonly KeyShift[],
): void {
  const layout = checkKeyShiftConfig(config, tables);
  if (cache.length % layout.blockWords !== 0) {
    throw new AttentionKernelError(
      'SHAPE_MISMATCH',
      `cache has ${cache.length} words, not a multiple of a block's ${layout.blockWords}.`,
    );
  }
  checkKeyShifts(shifts, cache.length / layout.blockWords, config.rope.maxPosition);
  const { headDim: D, blockSize: B, numKvHeads: H, format } = layout;
  const half = tables.half;
  // Pair indices once per call: ropePair allocates, and this loop runs per cached row.
  const pa = new Int32Array(half);
  const pb = new Int32Array(half);
  for (let i = 0; i < half; i++) [pa[i], pb[i]] = ropePair(config.rope.style, half, i);
  const row = new Float32Array(D);
  const cos = new Float32Array(half);
  const sin = new Float32Array(half);
  for (const { block, delta } of shifts) {
    const base = Math.abs(delta) * half;
    const sign = delta < 0 ? -1 : 1;
    for (let i = 0; i < half; i++) {
      cos[i] = tables.cos[base + i]!;
      sin[i] = sign * tables.sin[base + i]!;
    }
    for (let h = 0; h < H; h++) {
      const slab = block * layout.blockWords + 2 * h * layout.slabWords;
      for (let t = 0; t < B; t++) {
        format.decodeRow(cache, slab, t, row, B);
        for (let i = 0; i < half; i++) {
          const a = pa[i]!;
          const b = pb[i]!;
          const c = cos[i]!;
          const s = sin[i]!;
          const x0 = row[a]!;
          const x1 = row[b]!;
          row[a] = fr(fr(x0 * c) - fr(x1 * s));
          row[b] = fr(fr(x1 * c) + fr(x0 * s));
        }
        format.encodeRow(cache, slab, t, row, B);
      }
    }
  }
}
