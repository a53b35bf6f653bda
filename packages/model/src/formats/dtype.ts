import { bf16BitsToF32, f16BitsToF32, f32ToBf16Bits, f32ToF16Bits } from '@kvasir/quantizer';
import { ModelError } from '../errors.js';

/** Element types a checkpoint tensor may hold. `Q8_0` is GGUF's 34-byte block of 32 int8 values with an f16 scale. */
export type TensorDtype = 'F32' | 'F16' | 'BF16' | 'Q8_0';

/** Values per Q8_0 block. */
export const Q8_0_BLOCK_VALUES = 32;
/** Bytes per Q8_0 block: an f16 scale then 32 int8 values. */
export const Q8_0_BLOCK_BYTES = 34;

/**
 * Bytes needed to store `numElements` values of `dtype`.
 *
 * @throws {@link ModelError} `SHAPE_MISMATCH` when a Q8_0 count is not a multiple of 32.
 */
export function dtypeByteLength(dtype: TensorDtype, numElements: number): number {
  switch (dtype) {
    case 'F32':
      return numElements * 4;
    case 'F16':
    case 'BF16':
      return numElements * 2;
    case 'Q8_0':
      if (numElements % Q8_0_BLOCK_VALUES !== 0) {
        throw new ModelError(
          'SHAPE_MISMATCH',
          `Q8_0 needs a multiple of ${Q8_0_BLOCK_VALUES} values, got ${numElements}`,
        );
      }
      return (numElements / Q8_0_BLOCK_VALUES) * Q8_0_BLOCK_BYTES;
  }
}

/** Smallest byte count a whole number of `dtype` elements can occupy (4, 2, 2 or 34). */
export function dtypeUnitBytes(dtype: TensorDtype): number {
  return dtype === 'F32' ? 4 : dtype === 'Q8_0' ? Q8_0_BLOCK_BYTES : 2;
}

// One definition of the half-precision conversions: @kvasir/quantizer's (re-exported for the
// package's existing users).
export { bf16BitsToF32, f16BitsToF32, f32ToBf16Bits, f32ToF16Bits };

/**
 * Quantizes float values to Q8_0 blocks exactly as llama.cpp's reference quantizer does:
 * per 32 values, `d = amax / 127` stored as f16, `q = round(x / d)` (half away from zero).
 *
 * @throws {@link ModelError} `SHAPE_MISMATCH` when `values.length` is not a multiple of 32.
 */
export function quantizeQ8_0(values: Float32Array): Uint8Array {
  const out = new Uint8Array(dtypeByteLength('Q8_0', values.length));
  const view = new DataView(out.buffer);
  const blocks = values.length / Q8_0_BLOCK_VALUES;
  for (let b = 0; b < blocks; b++) {
    const base = b * Q8_0_BLOCK_VALUES;
    let amax = 0;
    for (let j = 0; j < Q8_0_BLOCK_VALUES; j++) {
      const a = Math.abs(values[base + j]!);
      if (a > amax) amax = a;
    }
    const d = Math.fround(amax / 127);
    const id = d !== 0 ? Math.fround(1 / d) : 0;
    const o = b * Q8_0_BLOCK_BYTES;
    view.setUint16(o, f32ToF16Bits(d), true);
    for (let j = 0; j < Q8_0_BLOCK_VALUES; j++) {
      const x = Math.fround(values[base + j]! * id);
      const q = Math.sign(x) * Math.round(Math.abs(x));
      view.setInt8(o + 2 + j, Math.max(-128, Math.min(127, q)));
    }
  }
  return out;
}

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
  const blocks = bytes.byteLength / Q8_0_BLOCK_BYTES;
  const out = new Float32Array(blocks * Q8_0_BLOCK_VALUES);
  for (let b = 0; b < blocks; b++) {
    const o = b * Q8_0_BLOCK_BYTES;
    const d = f16BitsToF32(view.getUint16(o, true));
    for (let j = 0; j < Q8_0_BLOCK_VALUES; j++) {
      out[b * Q8_0_BLOCK_VALUES + j] = d * view.getInt8(o + 2 + j);
    }
  }
  return out;
}

/** Dequantizes Q8_0 blocks to float32 (`value = d × q`). */
export function dequantizeQ8_0(bytes: Uint8Array): Float32Array {
  return decodeToF32('Q8_0', bytes);
}

/**
 * Encodes float32 values as little-endian bytes of `dtype` (F16/BF16 round to nearest even;
 * Q8_0 through {@link quantizeQ8_0}).
 *
 * @throws {@link ModelError} `SHAPE_MISMATCH` for a Q8_0 length that is not a multiple of 32.
 */
export function encodeFromF32(dtype: TensorDtype, values: Float32Array): Uint8Array {
  if (dtype === 'Q8_0') return quantizeQ8_0(values);
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
