import { ModelError } from './errors.js';

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

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** IEEE half bits → number. */
export function f16BitsToF32(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >> 10) & 0x1f;
  const frac = h & 0x3ff;
  if (exp === 0) return sign * frac * 2 ** -24;
  if (exp === 31) return frac ? Number.NaN : sign * Number.POSITIVE_INFINITY;
  return sign * (1 + frac / 1024) * 2 ** (exp - 15);
}

/** number → IEEE half bits, round to nearest even, overflow to infinity. */
export function f32ToF16Bits(value: number): number {
  f32[0] = value;
  const x = u32[0]!;
  const sign = (x >>> 16) & 0x8000;
  const exp = (x >>> 23) & 0xff;
  let mant = x & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0);
  let e = exp - 127 + 15;
  if (e >= 31) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - e;
    const halfway = 1 << (shift - 1);
    const rem = mant & ((1 << shift) - 1);
    let m = mant >>> shift;
    if (rem > halfway || (rem === halfway && (m & 1) === 1)) m++;
    return sign | m;
  }
  let m = mant >>> 13;
  const rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem === 0x1000 && (m & 1) === 1)) {
    m++;
    if (m === 0x400) {
      m = 0;
      e++;
      if (e >= 31) return sign | 0x7c00;
    }
  }
  return sign | (e << 10) | m;
}

/** bfloat16 bits → number. */
export function bf16BitsToF32(b: number): number {
  u32[0] = (b & 0xffff) << 16;
  return f32[0]!;
}

/** number → bfloat16 bits, round to nearest even (NaN stays NaN). */
export function f32ToBf16Bits(value: number): number {
  f32[0] = value;
  const x = u32[0]!;
  if ((x & 0x7fffffff) > 0x7f800000) return ((x >>> 16) | 0x40) & 0xffff;
  const rounded = x + 0x7fff + ((x >>> 16) & 1);
  return (rounded >>> 16) & 0xffff;
}

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
