// WGSL twins of the CPU codecs. They work on u32 bit patterns only: compatibility-mode adapters
// (llvmpipe) have no shader-f16, and some GPUs flush subnormal f32 in arithmetic, so nothing
// here relies on float arithmetic to convert formats.

import { formatInfo, type QuantFormat } from './format.js';
import { INT4_MAX, INT8_MAX } from './integer.js';
import { FLOAT_FORMATS, type FloatFormat, f32ToBits } from './minifloat.js';

/** Options of the WGSL float codec generators. */
export interface WgslFloatOptions {
  /** Encoders clamp finite overflow to ±max (default true), as the CPU `saturate` option. */
  readonly saturate?: boolean;
}

const u = (n: number): string => `${n >>> 0}u`;
/** An exact f32 constant, immune to how a compiler rounds decimal literals. */
const f32Const = (x: number): string => `bitcast<f32>(${u(f32ToBits(x))})`;

/** WGSL identifier prefix of a float format's functions: `f16`, `bf16`, `fp8_e4m3`, `fp8_e5m2`. */
export function wgslPrefix(format: FloatFormat): string {
  return format.replace('-', '_');
}

/**
 * WGSL source of `<p>_encode_bits(x: u32) -> u32`, `<p>_encode(x: f32) -> u32`,
 * `<p>_decode_bits(c: u32) -> u32` and `<p>_decode(c: u32) -> f32` for `format`, with
 * `<p>` = {@link wgslPrefix}. Bit for bit the same as `encodeFloatBits` / `decodeFloatBits`.
 */
export function wgslFloatCodec(format: FloatFormat, options?: WgslFloatOptions): string {
  const s = FLOAT_FORMATS[format];
  const saturate = options?.saturate ?? true;
  const p = wgslPrefix(format);
  const m = s.mantBits;
  const b = s.bias;
  const signBit = 1 << (s.bits - 1);
  const expMax = (1 << s.expBits) - 1;
  const overflow = saturate ? s.maxCode : (s.infCode ?? s.nanCode);
  const infIn = s.infCode ?? (saturate ? s.maxCode : s.nanCode);
  const nanEnc = s.ieeeSpecials
    ? `sign | ${u(s.nanCode)} | ((a & 0x7fffffu) >> ${u(23 - m)})`
    : `sign | ${u(s.nanCode)}`;
  const specialsDec = s.ieeeSpecials
    ? `if (e == ${u(expMax)}) {
    if (f == 0u) { return sign | 0x7f800000u; }
    return sign | 0x7fc00000u | (f << ${u(23 - m)});
  }`
    : `if (mag == ${u(s.nanCode)}) { return sign | 0x7fc00000u; }`;
  const subDec =
    128 - b - m + 0 < 1
      ? `return sign | (f << ${u(23 - m)});`
      : `let lead = firstLeadingBit(f);
    return sign | ((${u(128 - b - m)} + lead) << 23u) | ((f << (23u - lead)) & 0x7fffffu);`;
  return `
fn ${p}_encode_bits(x: u32) -> u32 {
  let sign = (x >> ${u(31 - (s.bits - 1))}) & ${u(signBit)};
  let a = x & 0x7fffffffu;
  if (a > 0x7f800000u) { return ${nanEnc}; }
  if (a == 0x7f800000u) { return sign | ${u(infIn)}; }
  let e32 = a >> 23u;
  var r: u32;
  if (e32 > ${u(127 - b)}) {
    let v = a - ${u((127 - b) << 23)};
    r = (v + ${u((1 << (22 - m)) - 1)} + ((v >> ${u(23 - m)}) & 1u)) >> ${u(23 - m)};
  } else {
    let mant = (a & 0x7fffffu) | select(0u, 0x800000u, e32 != 0u);
    let sh = ${u(151 - b - m)} - max(e32, 1u);
    if (sh > 24u) {
      r = 0u;
    } else {
      r = mant >> sh;
      let rem = mant & ((1u << sh) - 1u);
      let half = 1u << (sh - 1u);
      if (rem > half || (rem == half && (r & 1u) == 1u)) { r = r + 1u; }
    }
  }
  if (r > ${u(s.maxCode)}) { r = ${u(overflow)}; }
  return sign | r;
}

fn ${p}_encode(x: f32) -> u32 {
  return ${p}_encode_bits(bitcast<u32>(x));
}

fn ${p}_decode_bits(c: u32) -> u32 {
  let sign = ((c >> ${u(s.bits - 1)}) & 1u) << 31u;
  let mag = c & ${u(signBit - 1)};
  let e = mag >> ${u(m)};
  let f = mag & ${u((1 << m) - 1)};
  ${specialsDec}
  if (e == 0u) {
    if (f == 0u) { return sign; }
    ${subDec}
  }
  return sign | ((e + ${u(127 - b)}) << 23u) | (f << ${u(23 - m)});
}

fn ${p}_decode(c: u32) -> f32 {
  return bitcast<f32>(${p}_decode_bits(c));
}
`;
}

/** {@link wgslFloatCodec} for IEEE binary16: `f16_encode` / `f16_decode` (no shader-f16 needed). */
export function wgslF16(options?: WgslFloatOptions): string {
  return wgslFloatCodec('f16', options);
}
/** {@link wgslFloatCodec} for bfloat16: `bf16_encode` / `bf16_decode`. */
export function wgslBf16(options?: WgslFloatOptions): string {
  return wgslFloatCodec('bf16', options);
}
/** {@link wgslFloatCodec} for OCP E4M3: `fp8_e4m3_encode` / `fp8_e4m3_decode`. */
export function wgslFp8E4m3(options?: WgslFloatOptions): string {
  return wgslFloatCodec('fp8-e4m3', options);
}
/** {@link wgslFloatCodec} for OCP E5M2: `fp8_e5m2_encode` / `fp8_e5m2_decode`. */
export function wgslFp8E5m2(options?: WgslFloatOptions): string {
  return wgslFloatCodec('fp8-e5m2', options);
}

/**
 * WGSL helpers every scaled format uses: `kq_is_nan(x)`, `kq_is_finite(x)`,
 * `kq_inverse_scale(s)` (0 for a zero scale), and `kq_scale_from_amax(amax, qmax_recip)`
 * (1 below the smallest normal f32), matching `inverseScale` and `scaleFromAmax`.
 */
export function wgslScaleHelpers(): string {
  return `
fn kq_is_nan(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }
fn kq_is_finite(x: f32) -> bool { return (bitcast<u32>(x) & 0x7f800000u) != 0x7f800000u; }
fn kq_inverse_scale(s: f32) -> f32 { if (s == 0.0) { return 0.0; } return 1.0 / s; }
fn kq_scale_from_amax(amax: f32, qmax_recip: f32) -> f32 {
  let s = amax * qmax_recip;
  return select(s, 1.0, s < ${f32Const(2 ** -126)});
}
`;
}

/** The exact f32 `1/max` constant a format's dynamic scale uses, as WGSL source. */
export function wgslQmaxRecip(format: 'fp8-e4m3' | 'fp8-e5m2' | 'int8'): string {
  return f32Const(1 / (format === 'int8' ? INT8_MAX : FLOAT_FORMATS[format].max));
}

/**
 * WGSL source of the symmetric int8 codec: `int8_encode(x, inv_scale) -> u32` (a byte,
 * two's complement), `int8_decode(byte, scale) -> f32`, `int8_unpack4(word, scale) -> vec4<f32>`
 * (byte j is element j) and `int8_scale_from_amax(amax)`. Includes {@link wgslScaleHelpers}
 * unless `withHelpers` is false.
 */
export function wgslInt8(withHelpers = true): string {
  return `${withHelpers ? wgslScaleHelpers() : ''}
fn int8_encode(x: f32, inv_scale: f32) -> u32 {
  if (kq_is_nan(x)) { return 0u; }
  let v = x * inv_scale;
  if (kq_is_nan(v)) { return 0u; }
  let q = clamp(round(v), ${-INT8_MAX}.0, ${INT8_MAX}.0);
  return bitcast<u32>(i32(q)) & 0xffu;
}

fn int8_decode(byte: u32, scale: f32) -> f32 {
  return f32(bitcast<i32>(byte << 24u) >> 24u) * scale;
}

fn int8_unpack4(w: u32, scale: f32) -> vec4<f32> {
  let q = vec4<i32>(bitcast<i32>(w << 24u), bitcast<i32>(w << 16u), bitcast<i32>(w << 8u), bitcast<i32>(w)) >> vec4<u32>(24u);
  return vec4<f32>(q) * scale;
}

fn int8_scale_from_amax(amax: f32) -> f32 {
  return kq_scale_from_amax(amax, ${wgslQmaxRecip('int8')});
}
`;
}

/**
 * WGSL source of the asymmetric int4 codec: `int4_encode(x, inv_scale, zero) -> u32` (0..15),
 * `int4_decode(q, scale, zero) -> f32` (`(q − zero) · scale`), `int4_unpack8(word, scale, zero,
 * half) -> vec4<f32>` (nibbles `4·half + j` of the word as element j), `int4_zero_point(lo,
 * inv_scale)` and `int4_scale_from_range(lo, hi)`. Includes {@link wgslScaleHelpers} unless
 * `withHelpers` is false.
 */
export function wgslInt4(withHelpers = true): string {
  return `${withHelpers ? wgslScaleHelpers() : ''}
fn int4_encode(x: f32, inv_scale: f32, zero: f32) -> u32 {
  if (kq_is_nan(x)) { return 0u; }
  let v = x * inv_scale;
  if (kq_is_nan(v)) { return 0u; }
  return u32(clamp(round(v) + zero, 0.0, ${INT4_MAX}.0));
}

fn int4_decode(q: u32, scale: f32, zero: f32) -> f32 {
  return (f32(q) - zero) * scale;
}

fn int4_unpack8(w: u32, scale: f32, zero: f32, half: u32) -> vec4<f32> {
  let q = (vec4<u32>(w) >> (vec4<u32>(0u, 4u, 8u, 12u) + 16u * half)) & vec4<u32>(15u);
  return (vec4<f32>(q) - zero) * scale;
}

fn int4_zero_point(lo: f32, inv_scale: f32) -> f32 {
  return -round(lo * inv_scale);
}

fn int4_scale_from_range(lo: f32, hi: f32) -> f32 {
  let s = max((hi - lo) * ${f32Const(1 / INT4_MAX)}, max(abs(lo), abs(hi)) * ${f32Const(2 ** -20)});
  return select(s, 0.0, s < ${f32Const(2 ** -126)});
}
`;
}

/**
 * The WGSL codec source for any format (float formats: {@link wgslFloatCodec}; `int8`,
 * `int4`: {@link wgslInt8}, {@link wgslInt4}).
 * @throws QuantizerError `UNKNOWN_FORMAT`.
 */
export function wgslCodec(format: QuantFormat, options?: WgslFloatOptions): string {
  if (format === 'int8') return wgslInt8();
  if (format === 'int4') return wgslInt4();
  formatInfo(format);
  return wgslFloatCodec(format as FloatFormat, options);
}
