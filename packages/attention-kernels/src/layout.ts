import { AttentionKernelError } from './errors.js';
import type { KvFormat } from './kv-format/types.js';

/** What fixes the word layout of one layer's paged KV cache buffer. */
export interface KvCacheConfig {
  readonly numKvHeads: number;
  readonly headDim: number;
  /** Tokens per block. */
  readonly blockSize: number;
  readonly format: KvFormat;
}

/** Word geometry of one layer's cache (see the README's "Cache layout"). */
export interface KvCacheLayout extends KvCacheConfig {
  /** Words of one token row of one head. */
  readonly rowWords: number;
  /** Words of one (block, head, K|V) slab: `blockSize * rowWords + scaleWordsPerSlab`. */
  readonly slabWords: number;
  /** Words of one block: `numKvHeads * 2 * slabWords`. */
  readonly blockWords: number;
  /** Bytes of one block of one layer. */
  readonly bytesPerBlock: number;
}

function positiveInt(value: number, name: string): void {
  if (!Number.isInteger(value) || value <= 0) {
    throw new AttentionKernelError(
      'INVALID_ARGUMENT',
      `${name} must be a positive integer, got ${value}.`,
      {
        details: { [name]: value },
      },
    );
  }
}

/**
 * The word layout of a cache configuration.
 *
 * @throws {AttentionKernelError} `INVALID_ARGUMENT` for non-positive sizes,
 *   `UNSUPPORTED_HEAD_DIM` when the format has no kernel for `headDim`.
 */
export function kvCacheLayout(config: KvCacheConfig): KvCacheLayout {
  positiveInt(config.numKvHeads, 'numKvHeads');
  positiveInt(config.blockSize, 'blockSize');
  positiveInt(config.headDim, 'headDim');
  if (!config.format.supportsHeadDim(config.headDim)) {
    throw new AttentionKernelError(
      'UNSUPPORTED_HEAD_DIM',
      `KV format ${config.format.name} has no kernel for head dim ${config.headDim}.`,
      { details: { headDim: config.headDim } },
    );
  }
  const rowWords = config.format.rowWords(config.headDim);
  const slabWords =
    config.blockSize * rowWords + config.format.scaleWordsPerSlab(config.blockSize, config.headDim);
  const blockWords = config.numKvHeads * 2 * slabWords;
  return { ...config, rowWords, slabWords, blockWords, bytesPerBlock: blockWords * 4 };
}

/** First word of the K (`kind` 0) or V (`kind` 1) slab of `head` in `block`. */
export function slabOffset(
  layout: KvCacheLayout,
  block: number,
  head: number,
  kind: 0 | 1,
): number {
  return block * layout.blockWords + (2 * head + kind) * layout.slabWords;
}

/** First word of the K row of token `t` (offset in block) of `head` in `block`. */
export function kRowOffset(layout: KvCacheLayout, block: number, head: number, t: number): number {
  return slabOffset(layout, block, head, 0) + t * layout.rowWords;
}

/** First word of the V row of token `t` (offset in block) of `head` in `block`. */
export function vRowOffset(layout: KvCacheLayout, block: number, head: number, t: number): number {
  return slabOffset(layout, block, head, 1) + t * layout.rowWords;
}

/** Bytes of a layer buffer holding `numBlocks` blocks. */
export function cacheBytes(layout: KvCacheLayout, numBlocks: number): number {
  return numBlocks * layout.bytesPerBlock;
}

/**
 * Blocks held by a cache buffer of `bytes` bytes.
 *
 * @throws {AttentionKernelError} `SHAPE_MISMATCH` when `bytes` is not a positive multiple of a
 *   block.
 */
export function blocksInCache(layout: KvCacheLayout, bytes: number): number {
  if (bytes <= 0 || bytes % layout.bytesPerBlock !== 0) {
    throw new AttentionKernelError(
      'SHAPE_MISMATCH',
      `A cache of ${bytes} bytes is not a positive multiple of the block size ${layout.bytesPerBlock} bytes.`,
      { details: { bytes, bytesPerBlock: layout.bytesPerBlock } },
    );
  }
  return bytes / layout.bytesPerBlock;
}
