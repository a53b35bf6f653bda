import type { ModelConfig } from './config.js';
import { ModelError } from './errors.js';

/** KV element formats the model can allocate. */
export type KvFormatName = 'f32' | 'f16';

/**
 * Word arithmetic of one layer's paged KV buffer (the contract in `@kvasir/attention-kernels`):
 * block b is words `[b*blockWords, (b+1)*blockWords)`, heads-major, K slab then V slab per kv
 * head, each slab `blockSize` rows of `rowWords` (+ scale words for quantized formats).
 */
export interface KvCacheSpec {
  readonly format: KvFormatName;
  readonly numLayers: number;
  readonly numKvHeads: number;
  readonly headDim: number;
  readonly blockSize: number;
  readonly numBlocks: number;
  readonly rowWords: number;
  readonly slabWords: number;
  readonly blockWords: number;
  /** Words of one layer's buffer. */
  readonly layerWords: number;
}

/**
 * The cache layout for a model config.
 * @throws {ModelError} `INVALID_ARGUMENT` for a bad format, block size or block count.
 */
export function kvCacheSpec(
  c: ModelConfig,
  options: { kvFormat: KvFormatName; blockSize: number; numBlocks: number },
): KvCacheSpec {
  const { kvFormat, blockSize, numBlocks } = options;
  if (kvFormat !== 'f32' && kvFormat !== 'f16') {
    throw new ModelError(
      'INVALID_ARGUMENT',
      `kvFormat '${String(kvFormat)}' is not supported (f32, f16)`,
    );
  }
  if (!(Number.isInteger(blockSize) && blockSize >= 1)) {
    throw new ModelError(
      'INVALID_ARGUMENT',
      `blockSize must be a positive integer, got ${blockSize}`,
    );
  }
  if (!(Number.isInteger(numBlocks) && numBlocks >= 1)) {
    throw new ModelError(
      'INVALID_ARGUMENT',
      `numBlocks must be a positive integer, got ${numBlocks}`,
    );
  }
  const rowWords = kvFormat === 'f32' ? c.headDim : c.headDim / 2;
  const slabWords = blockSize * rowWords;
  const blockWords = c.numKvHeads * 2 * slabWords;
  return {
    format: kvFormat,
    numLayers: c.numLayers,
    numKvHeads: c.numKvHeads,
    headDim: c.headDim,
    blockSize,
    numBlocks,
    rowWords,
    slabWords,
    blockWords,
    layerWords: numBlocks * blockWords,
  };
}

/** First word of the K (`kv = 0`) or V (`kv = 1`) row of `slot` for kv head `h`. */
export function kvRowWord(spec: KvCacheSpec, slot: number, h: number, kv: 0 | 1): number {
  const block = Math.floor(slot / spec.blockSize);
  const t = slot - block * spec.blockSize;
  return block * spec.blockWords + (2 * h + kv) * spec.slabWords + t * spec.rowWords;
}
