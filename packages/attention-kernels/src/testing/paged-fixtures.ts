import { randomFloats, type SeededRandom } from '@kvasir/test-utils';
import type { PagedAttentionConfig } from '../attention/config.js';
import type { KvFormat } from '../kv-format/types.js';
import { type KvCacheLayout, kvCacheLayout, slabOffset } from '../layout.js';
import { randomBlockTables, randomCache } from './random.js';

/** Test data for paged attention: a random cache, shuffled block tables, and dense K/V views. */
export interface PagedFixture {
  readonly config: PagedAttentionConfig;
  readonly layout: KvCacheLayout;
  readonly cache: Uint32Array;
  readonly numBlocks: number;
  readonly blockTables: Uint32Array;
  readonly maxBlocksPerSeq: number;
  readonly contextLens: Uint32Array;
  /** Per sequence, its cached K and V decoded to f32, `[contextLen][numKvHeads][headDim]`. */
  readonly denseK: Float32Array[];
  readonly denseV: Float32Array[];
}

/** Shape of a fixture. */
export interface FixtureShape {
  readonly numQHeads: number;
  readonly numKvHeads: number;
  readonly headDim: number;
  readonly blockSize: number;
  readonly format: KvFormat;
  readonly contextLens: readonly number[];
  readonly scale?: number;
  readonly softCap?: number;
  /** Sliding window of the config. */
  readonly window?: number;
  /** Attention sinks of the config (one logit per query head). */
  readonly sinks?: readonly number[];
  /** Unused blocks added to the pool so that tables are sparse. */
  readonly spareBlocks?: number;
}

/**
 * A cache whose blocks are shuffled over the pool (non-contiguous tables), filled with values in
 * [-1, 1) encoded with the format, and the dense K/V each sequence's table reads (decoded, so the
 * format's rounding is part of the ground truth).
 */
export function pagedFixture(rng: SeededRandom, shape: FixtureShape): PagedFixture {
  const config: PagedAttentionConfig = {
    numQHeads: shape.numQHeads,
    numKvHeads: shape.numKvHeads,
    headDim: shape.headDim,
    blockSize: shape.blockSize,
    format: shape.format,
    ...(shape.scale === undefined ? {} : { scale: shape.scale }),
    ...(shape.softCap === undefined ? {} : { softCap: shape.softCap }),
    ...(shape.window === undefined ? {} : { window: shape.window }),
    ...(shape.sinks === undefined ? {} : { sinks: shape.sinks }),
  };
  const layout = kvCacheLayout(config);
  const needed = shape.contextLens.reduce((a, c) => a + Math.ceil(c / shape.blockSize), 0);
  const numBlocks = Math.max(1, needed + (shape.spareBlocks ?? 3));
  const cache = randomCache(rng, layout, numBlocks);
  const { blockTables, maxBlocksPerSeq } = randomBlockTables(
    rng,
    shape.contextLens,
    shape.blockSize,
    numBlocks,
  );
  const { numKvHeads: H, headDim: D, blockSize: B } = config;
  const row = new Float32Array(D);
  const denseK: Float32Array[] = [];
  const denseV: Float32Array[] = [];
  shape.contextLens.forEach((len, s) => {
    const k = new Float32Array(len * H * D);
    const v = new Float32Array(len * H * D);
    for (let j = 0; j < len; j++) {
      const block = blockTables[s * maxBlocksPerSeq + Math.floor(j / B)]!;
      for (let h = 0; h < H; h++) {
        shape.format.decodeRow(cache, slabOffset(layout, block, h, 0), j % B, row, B);
        k.set(row, (j * H + h) * D);
        shape.format.decodeRow(cache, slabOffset(layout, block, h, 1), j % B, row, B);
        v.set(row, (j * H + h) * D);
      }
    }
    denseK.push(k);
    denseV.push(v);
  });
  return {
    config,
    layout,
    cache,
    numBlocks,
    blockTables,
    maxBlocksPerSeq,
    contextLens: Uint32Array.from(shape.contextLens),
    denseK,
    denseV,
  };
}

/** Random queries for `numTokens` tokens, `[numTokens][numQHeads][headDim]`. */
export function randomQuery(
  rng: SeededRandom,
  config: PagedAttentionConfig,
  numTokens: number,
): Float32Array {
  return randomFloats(rng, numTokens * config.numQHeads * config.headDim);
}

/** A paged attention configuration as the tests describe it: a fixture shape less its data. */
export type AttentionShape = Omit<FixtureShape, 'contextLens' | 'spareBlocks'>;

/** Each sequence's first query row when sequences' rows are packed in order. */
export function queryStartsOf(queryLens: readonly number[]): Uint32Array {
  const queryStarts = new Uint32Array(queryLens.length);
  for (let s = 1; s < queryLens.length; s++) {
    queryStarts[s] = queryStarts[s - 1]! + queryLens[s - 1]!;
  }
  return queryStarts;
}

/** A prefill batch over a fresh fixture, with the host arguments both prefill paths take. */
export interface PrefillBatchFixture {
  readonly fx: PagedFixture;
  readonly args: {
    readonly query: Float32Array;
    readonly blockTables: Uint32Array;
    readonly queryStarts: Uint32Array;
    readonly queryLens: Uint32Array;
    readonly contextLens: Uint32Array;
    readonly numSeqs: number;
    readonly maxBlocksPerSeq: number;
  };
}

/**
 * Sequence `s` has `pasts[s]` cached tokens and `queryLens[s]` new ones (already in the cache,
 * as after `WriteKvCache`); the queries of all new tokens are random and packed in order.
 */
export function prefillBatchFixture(
  rng: SeededRandom,
  shape: AttentionShape & { readonly spareBlocks?: number },
  pasts: readonly number[],
  queryLens: readonly number[],
): PrefillBatchFixture {
  const contextLens = pasts.map((p, i) => p + queryLens[i]!);
  const fx = pagedFixture(rng, { ...shape, contextLens });
  const numTokens = queryLens.reduce((a, b) => a + b, 0);
  const query = randomQuery(rng, fx.config, numTokens);
  return {
    fx,
    args: {
      query,
      blockTables: fx.blockTables,
      queryStarts: queryStartsOf(queryLens),
      queryLens: Uint32Array.from(queryLens),
      contextLens: fx.contextLens,
      numSeqs: queryLens.length,
      maxBlocksPerSeq: fx.maxBlocksPerSeq,
    },
  };
}
