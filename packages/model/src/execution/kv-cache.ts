import {
  f16Format,
  f32Format,
  type KvFormat,
  kvCacheLayout,
  QUANTIZED_KV_FORMATS,
} from '@kvasir/attention-kernels';
import type { ModelConfig } from '../config.js';
import { ModelError } from '../errors.js';
import { checkKvGroups, type KvGroups } from './kv-groups.js';

/**
 * KV element formats the model can allocate: `f32`, `f16`, and `@kvasir/attention-kernels`'
 * quantized formats (`int8`, `fp8-e4m3`, `fp8-e5m2`, `int4-g32`, with per-row scales in
 * each slab).
 */
export type KvFormatName =
  | 'f32'
  | 'f16'
  | 'int8'
  | 'int8-h8'
  | 'fp8-e4m3'
  | 'fp8-e5m2'
  | 'int4-g32'
  | 'int4-g32-h32';

/** The `@kvasir/attention-kernels` format object of a name, or undefined. */
export function resolveKvFormat(name: string): KvFormat | undefined {
  return [f32Format, f16Format, ...QUANTIZED_KV_FORMATS].find((f) => f.name === name);
}

/**
 * Word arithmetic of one layer's paged KV buffer (the contract in `@kvasir/attention-kernels`):
 * block b is words `[b*blockWords, (b+1)*blockWords)`, heads-major, K slab then V slab per kv
 * head, each slab `blockSize` rows of `rowWords` (+ scale words for quantized formats).
 */
export interface KvCacheSpec {
  readonly format: KvFormatName;
  /** The format's codec (CPU encode/decode rows, WGSL load/store). */
  readonly kvFormat: KvFormat;
  /** Layer buffers: the model's layers, or with {@link groups} its `layersPerGroup`. */
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
  /** KV cache groups: which buffer and block tables each layer uses (absent: its own, one group). */
  readonly groups?: KvGroups;
}

/**
 * The cache layout for a model config.
 * @throws {ModelError} `INVALID_ARGUMENT` for a bad format, block size or block count.
 */
export function kvCacheSpec(
  c: ModelConfig,
  options: { kvFormat: KvFormatName; blockSize: number; numBlocks: number; groups?: KvGroups },
): KvCacheSpec {
  const { kvFormat, blockSize, numBlocks, groups } = options;
  if (groups) checkKvGroups(c, groups);
  const format = resolveKvFormat(kvFormat);
  if (!format) {
    throw new ModelError(
      'INVALID_ARGUMENT',
      `kvFormat '${String(kvFormat)}' is not supported (f32, f16, ${QUANTIZED_KV_FORMATS.map((f) => f.name).join(', ')})`,
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
  let layout: ReturnType<typeof kvCacheLayout>;
  try {
    layout = kvCacheLayout({ numKvHeads: c.numKvHeads, headDim: c.headDim, blockSize, format });
  } catch (cause) {
    throw new ModelError(
      'INVALID_ARGUMENT',
      `kvFormat '${kvFormat}': ${(cause as Error).message}`,
      { cause },
    );
  }
  const { rowWords, slabWords, blockWords } = layout;
  return {
    format: kvFormat,
    kvFormat: format,
    numLayers: groups ? groups.layersPerGroup : c.numLayers,
    numKvHeads: c.numKvHeads,
    headDim: c.headDim,
    blockSize,
    numBlocks,
    rowWords,
    slabWords,
    blockWords,
    layerWords: numBlocks * blockWords,
    ...(groups ? { groups } : {}),
  };
}

/** First word of the K (`kv = 0`) or V (`kv = 1`) row of `slot` for kv head `h`. */
export function kvRowWord(spec: KvCacheSpec, slot: number, h: number, kv: 0 | 1): number {
  const block = Math.floor(slot / spec.blockSize);
  const t = slot - block * spec.blockSize;
  return block * spec.blockWords + (2 * h + kv) * spec.slabWords + t * spec.rowWords;
}
