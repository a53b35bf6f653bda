import { bf16BitsToF32, f16BitsToF32, f32ToBf16Bits, f32ToF16Bits } from '@kvasir/quantizer';
import {
  GGML_BLOCK_FORMATS,
  type GgmlBlockFormat,
  type GgmlBlockType,
} from '@kvasir/quantizer/ggml';
import { ModelError } from '../errors.js';

/**
 * Element types a checkpoint tensor may hold: plain floats, or one of GGML's block formats
 * (`Q8_0`, `Q4_K`, ...: a run of 32 or 256 weights stored as one block with its scales, as
 * `@kvasir/quantizer/ggml` defines them).
 */
export type TensorDtype = 'F32' | 'F16' | 'BF16' | GgmlBlockType;

/** Whether `dtype` is a GGML block format (stored as blocks, not one value per element). */
export function isBlockDtype(dtype: TensorDtype): dtype is GgmlBlockType {
  return dtype !== 'F32' && dtype !== 'F16' && dtype !== 'BF16';
}

function blockFormat(dtype: GgmlBlockType, numElements: number): GgmlBlockFormat {
  const f = GGML_BLOCK_FORMATS[dtype];
  if (numElements % f.blockSize !== 0) {
    throw new ModelError(
      'SHAPE_MISMATCH',
      `${dtype} needs a multiple of ${f.blockSize} values, got ${numElements}`,
    );
  }
  return f;
}

/** Values per Q8_0 block. */
export const Q8_0_BLOCK_VALUES = 32;
/** Bytes per Q8_0 block: an f16 scale then 32 int8 values. */
export const Q8_0_BLOCK_BYTES = 34;

/**
 * Bytes needed to store `numElements` values of `dtype`.
 *
 * @throws {@link ModelError} `SHAPE_MISMATCH` when a block format's count is not a whole
 *   number of blocks.
 */
export function dtypeByteLength(dtype: TensorDtype, numElements: number): number {
  if (dtype === 'F32') return numElements * 4;
  if (dtype === 'F16' || dtype === 'BF16') return numElements * 2;
  const f = blockFormat(dtype, numElements);
  return (numElements / f.blockSize) * f.bytesPerBlock;
}

/** Smallest byte count a whole number of `dtype` elements can occupy (4, 2, or one block). */
export function dtypeUnitBytes(dtype: TensorDtype): number {
  if (dtype === 'F32') return 4;
  if (dtype === 'F16' || dtype === 'BF16') return 2;
  return GGML_BLOCK_FORMATS[dtype].bytesPerBlock;
}

/** Storage bits per weight of `dtype`, block scales included (Q4_K: 4.5). */
export function dtypeBitsPerWeight(dtype: TensorDtype): number {
  if (dtype === 'F32') return 32;
  if (dtype === 'F16' || dtype === 'BF16') return 16;
  return GGML_BLOCK_FORMATS[dtype].bitsPerWeight;
}

// One definition of the half-precision conversions: @kvasir/quantizer's (re-exported for the
// package's existing users).
export { bf16BitsToF32, f16BitsToF32, f32ToBf16Bits, f32ToF16Bits };

/**
 * Decodes raw little-endian tensor bytes of any {@link TensorDtype} to float32.
 *
 * @throws {@link ModelError} `SHAPE_MISMATCH` when the byte count is not a whole number of elements.
 */
export function decodeToF32(dtype: TensorDtype, bytes: Uint8Array): Float32Array {
  const unit = dtypeUnitBytes(dtype);
  if (bytes.byteLength % unit !== 0) {
    throw new ModelError(
      'SHAPE_MISMATCH',
      `${bytes.byteLength} bytes are not a whole number of ${dtype} elements`,
    );
  }
  if (isBlockDtype(dtype)) {
    const f = GGML_BLOCK_FORMATS[dtype];
    const n = (bytes.byteLength / f.bytesPerBlock) * f.blockSize;
    const out = new Float32Array(n);
    f.dequantize(bytes, 0, out, 0, n);
    return out;
  }
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (dtype === 'F32') {
    const out = new Float32Array(bytes.byteLength / 4);
    for (let i = 0; i < out.length; i++) out[i] = view.getFloat32(i * 4, true);
    return out;
  }
  if (dtype === 'F16' || dtype === 'BF16') {
    const out = new Float32Array(bytes.byteLength / 2);
    const conv = dtype === 'F16' ? f16BitsToF32 : bf16BitsToF32;
    for (let i = 0; i < out.length; i++) out[i] = conv(view.getUint16(i * 2, true));
    return out;
  }
  throw new ModelError('INVALID_ARGUMENT', `unknown tensor dtype ${String(dtype)}`);
}

/**
 * Encodes float32 values as little-endian bytes of `dtype` (F16/BF16 round to nearest even;
 * the block formats through ggml's reference quantizers in `@kvasir/quantizer/ggml`).
 *
 * @throws {@link ModelError} `SHAPE_MISMATCH` for a block format's length that is not a whole
 *   number of blocks.
 */
export function encodeFromF32(dtype: TensorDtype, values: Float32Array): Uint8Array {
  if (isBlockDtype(dtype)) {
    const out = new Uint8Array(dtypeByteLength(dtype, values.length));
    GGML_BLOCK_FORMATS[dtype].quantize(values, 0, out, 0, values.length);
    return out;
  }
  const out = new Uint8Array(dtypeByteLength(dtype, values.length));
  const view = new DataView(out.buffer);
  if (dtype === 'F32') {
    for (let i = 0; i < values.length; i++) view.setFloat32(i * 4, values[i]!, true);
  } else {
    const conv = dtype === 'F16' ? f32ToF16Bits : f32ToBf16Bits;
    for (let i = 0; i < values.length; i++) view.setUint16(i * 2, conv(values[i]!), true);
  }
  return out;
}
