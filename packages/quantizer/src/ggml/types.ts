// The GGML block formats this package decodes, by their `GGML_TYPE_*` numbers (ggml.h), and the
// one place a type id becomes a codec. Every format stores a run of `blockSize` weights as one
// `bytesPerBlock`-byte struct (ggml-common.h), little-endian, f16 scales included; a GGUF tensor
// row is a whole number of blocks, packed with no padding.

import { QuantizerError } from '../errors.js';
import { checkBlocks } from './block-io.js';
import { dequantizeIq4Nl, quantizeIq4Nl } from './iq4-nl.js';
import {
  dequantizeQ2K,
  dequantizeQ3K,
  dequantizeQ4K,
  dequantizeQ5K,
  dequantizeQ6K,
  quantizeQ2K,
  quantizeQ3K,
  quantizeQ4K,
  quantizeQ5K,
  quantizeQ6K,
} from './k-quants.js';
import {
  dequantizeQ4_0,
  dequantizeQ4_1,
  dequantizeQ5_0,
  dequantizeQ5_1,
  dequantizeQ8_0,
  quantizeQ4_0,
  quantizeQ4_1,
  quantizeQ5_0,
  quantizeQ5_1,
  quantizeQ8_0,
} from './legacy.js';
import { dequantizeMxfp4, quantizeMxfp4 } from './mxfp4.js';

/** Every `GGML_TYPE_*` of ggml.h by name (ids 4, 5 and 31–33, 36–38 were removed from ggml). */
export const GGML_TYPE_IDS = {
  F32: 0,
  F16: 1,
  Q4_0: 2,
  Q4_1: 3,
  Q5_0: 6,
  Q5_1: 7,
  Q8_0: 8,
  Q8_1: 9,
  Q2_K: 10,
  Q3_K: 11,
  Q4_K: 12,
  Q5_K: 13,
  Q6_K: 14,
  Q8_K: 15,
  IQ2_XXS: 16,
  IQ2_XS: 17,
  IQ3_XXS: 18,
  IQ1_S: 19,
  IQ4_NL: 20,
  IQ3_S: 21,
  IQ2_S: 22,
  IQ4_XS: 23,
  I8: 24,
  I16: 25,
  I32: 26,
  I64: 27,
  F64: 28,
  IQ1_M: 29,
  BF16: 30,
  TQ1_0: 34,
  TQ2_0: 35,
  MXFP4: 39,
  NVFP4: 40,
  Q1_0: 41,
  Q2_0: 42,
} as const;

/** The name of any GGML type, as ggml spells it. */
export type GgmlTypeName = keyof typeof GGML_TYPE_IDS;

/** The block-quantized GGML types this package encodes and decodes. */
export type GgmlBlockType =
  | 'Q4_0'
  | 'Q4_1'
  | 'Q5_0'
  | 'Q5_1'
  | 'Q8_0'
  | 'Q2_K'
  | 'Q3_K'
  | 'Q4_K'
  | 'Q5_K'
  | 'Q6_K'
  | 'IQ4_NL'
  | 'MXFP4';

/**
 * Decodes `n` weights (a multiple of the block size) from the blocks starting at byte
 * `srcOffset` of `src` into `dst[dstOffset ..]`, with ggml's arithmetic (bit-exact f32).
 */
export type GgmlDequantize = (
  src: Uint8Array,
  srcOffset: number,
  dst: Float32Array,
  dstOffset: number,
  n: number,
) => void;

/**
 * Encodes `n` weights (a multiple of the block size) of `src[srcOffset ..]` into blocks written
 * at byte `dstOffset` of `dst`, as ggml's reference (`quantize_row_*_ref`, no importance matrix).
 */
export type GgmlQuantize = (
  src: Float32Array,
  srcOffset: number,
  dst: Uint8Array,
  dstOffset: number,
  n: number,
) => void;

/** One GGML block format: its layout and its CPU codec. */
export interface GgmlBlockFormat {
  readonly name: GgmlBlockType;
  /** `GGML_TYPE_<name>` of ggml.h, as stored in a GGUF tensor info. */
  readonly id: number;
  /** Weights per block (32 for the legacy formats, IQ4_NL and MXFP4, 256 = QK_K for the k-quants). */
  readonly blockSize: number;
  /** Bytes per block, `sizeof(block_<name>)`. */
  readonly bytesPerBlock: number;
  /** `8 · bytesPerBlock / blockSize`, scales included (Q4_K: 4.5). */
  readonly bitsPerWeight: number;
  readonly dequantize: GgmlDequantize;
  readonly quantize: GgmlQuantize;
}

const fmt = (
  name: GgmlBlockType,
  blockSize: number,
  bytesPerBlock: number,
  dequantize: GgmlDequantize,
  quantize: GgmlQuantize,
): GgmlBlockFormat =>
  Object.freeze({
    name,
    id: GGML_TYPE_IDS[name],
    blockSize,
    bytesPerBlock,
    bitsPerWeight: (8 * bytesPerBlock) / blockSize,
    dequantize,
    quantize,
  });

/** The supported block formats by name, sizes as ggml-common.h's `static_assert`s. */
export const GGML_BLOCK_FORMATS: Readonly<Record<GgmlBlockType, GgmlBlockFormat>> = Object.freeze({
  Q4_0: fmt('Q4_0', 32, 18, dequantizeQ4_0, quantizeQ4_0),
  Q4_1: fmt('Q4_1', 32, 20, dequantizeQ4_1, quantizeQ4_1),
  Q5_0: fmt('Q5_0', 32, 22, dequantizeQ5_0, quantizeQ5_0),
  Q5_1: fmt('Q5_1', 32, 24, dequantizeQ5_1, quantizeQ5_1),
  Q8_0: fmt('Q8_0', 32, 34, dequantizeQ8_0, quantizeQ8_0),
  Q2_K: fmt('Q2_K', 256, 84, dequantizeQ2K, quantizeQ2K),
  Q3_K: fmt('Q3_K', 256, 110, dequantizeQ3K, quantizeQ3K),
  Q4_K: fmt('Q4_K', 256, 144, dequantizeQ4K, quantizeQ4K),
  Q5_K: fmt('Q5_K', 256, 176, dequantizeQ5K, quantizeQ5K),
  Q6_K: fmt('Q6_K', 256, 210, dequantizeQ6K, quantizeQ6K),
  IQ4_NL: fmt('IQ4_NL', 32, 18, dequantizeIq4Nl, quantizeIq4Nl),
  MXFP4: fmt('MXFP4', 32, 17, dequantizeMxfp4, quantizeMxfp4),
});

const byId = new Map<number, GgmlBlockFormat>(
  Object.values(GGML_BLOCK_FORMATS).map((f) => [f.id, f]),
);
const nameById = new Map<number, string>(
  Object.entries(GGML_TYPE_IDS).map(([name, id]) => [id, name]),
);

/** ggml's name of type `id` (`'Q4_K'`), or `'unknown type <id>'` for an id ggml does not define. */
export function ggmlTypeName(id: number): string {
  return nameById.get(id) ?? `unknown type ${id}`;
}

/** Whether `type` (a GGML type id or name) is one of the block formats this package decodes. */
export function isGgmlBlockType(type: number | string): boolean {
  return typeof type === 'number' ? byId.has(type) : Object.hasOwn(GGML_BLOCK_FORMATS, type);
}

/**
 * The block format of a GGML type id (`GGML_TYPE_Q4_K` = 12) or name (`'Q4_K'`).
 *
 * @throws {QuantizerError} `UNSUPPORTED_GGML_TYPE` for a type that is not a supported block
 * format (F32 / F16 / BF16 are plain arrays, not block formats; IQ2_XXS and the other
 * grid-based i-quants, TQ1_0, NVFP4 etc. are not implemented), naming the type.
 */
export function ggmlBlockFormat(type: number | string): GgmlBlockFormat {
  const f =
    typeof type === 'number'
      ? byId.get(type)
      : Object.hasOwn(GGML_BLOCK_FORMATS, type)
        ? GGML_BLOCK_FORMATS[type as GgmlBlockType]
        : undefined;
  if (f) return f;
  const label =
    typeof type === 'number'
      ? `${ggmlTypeName(type)} (GGML type ${type})`
      : `'${type}'${Object.hasOwn(GGML_TYPE_IDS, type) ? ` (GGML type ${GGML_TYPE_IDS[type as GgmlTypeName]})` : ''}`;
  throw new QuantizerError(
    'UNSUPPORTED_GGML_TYPE',
    `${label} is not a supported GGML block format (supported: ${Object.keys(GGML_BLOCK_FORMATS).join(', ')})`,
  );
}

/**
 * Bytes of `n` weights of `type` (a row of a GGUF tensor).
 *
 * @throws {QuantizerError} `UNSUPPORTED_GGML_TYPE` as {@link ggmlBlockFormat}; `BAD_SHAPE` when
 * `n` is not a whole number of blocks.
 */
export function ggmlRowBytes(type: number | GgmlBlockType, n: number): number {
  const f = ggmlBlockFormat(type);
  checkBlocks(f, n);
  return (n / f.blockSize) * f.bytesPerBlock;
}
