// The unscaled float KV formats: f32, and f16 packed two halves to a word.

import { f16BitsToF32, f32ToF16Bits } from '@kvasir/quantizer';
import { checkHeadDim, multipleOf, quadRead, unscaledStorePrelude, wordRead } from './helpers.js';
import type { F16Unpack, KvFormat } from './types.js';

/**
 * WGSL of `kv_unpack8(p: vec4<u32>) -> array<vec4<f32>, 2>`: the 8 halves packed in `p`
 * (element `2i` in the low half of word `i`) as f32, by `mode` (see {@link KvWgslOptions.f16Unpack}).
 */
export function f16UnpackWgsl(mode: F16Unpack = 'builtin'): string {
  if (mode === 'builtin') {
    return /* wgsl */ `
fn kv_unpack8(p: vec4<u32>) -> array<vec4<f32>, 2> {
  return array<vec4<f32>, 2>(
    vec4<f32>(unpack2x16float(p.x), unpack2x16float(p.y)),
    vec4<f32>(unpack2x16float(p.z), unpack2x16float(p.w)));
}
`;
  }
  // Magnitude bits m (15 bits) and the sign already in place: a normal half is the f32 with
  // the exponent rebiased by 112 (m << 13 plus 112 << 23), a subnormal is m * 2^-24 exactly,
  // and an infinity or NaN (m >= 0x7c00) needs the exponent rebiased once more, to 255.
  return /* wgsl */ `
fn kv_half_bits(m: vec4<u32>, sign: vec4<u32>) -> vec4<f32> {
  let normal = (m << vec4<u32>(13u)) + vec4<u32>(0x38000000u);
  let sub = bitcast<vec4<u32>>(vec4<f32>(m) * 5.9604645e-8);
  var b = select(normal, sub, m < vec4<u32>(0x400u));
  b = select(b, normal + vec4<u32>(0x38000000u), m >= vec4<u32>(0x7c00u));
  return bitcast<vec4<f32>>(b | sign);
}
fn kv_unpack8(p: vec4<u32>) -> array<vec4<f32>, 2> {
  let lo = kv_half_bits(p & vec4<u32>(0x7fffu), (p & vec4<u32>(0x8000u)) << vec4<u32>(16u));
  let hi = kv_half_bits((p >> vec4<u32>(16u)) & vec4<u32>(0x7fffu), p & vec4<u32>(0x80000000u));
  return array<vec4<f32>, 2>(vec4<f32>(lo.x, hi.x, lo.y, hi.y), vec4<f32>(lo.z, hi.z, lo.w, hi.w));
}
`;
}

/** 32-bit floats, one element per word. */
export const f32Format: KvFormat = {
  name: 'f32',
  rowScaled: false,
  storeChunk: 4,
  rowWords: (headDim) => headDim,
  scaleWordsPerSlab: () => 0,
  supportsHeadDim: multipleOf(8),
  wgslLoad(o) {
    checkHeadDim(this, o.headDim, 8);
    const quad = quadRead(o);
    return /* wgsl */ `
fn kv_load4(slab: u32, t: u32, q: u32) -> vec4<f32> {
  return bitcast<vec4<f32>>(${quad(`slab + t * ${o.headDim}u + 4u * q`)});
}
fn kv_load8(slab: u32, t: u32, c: u32) -> array<vec4<f32>, 2> {
  let w = slab + t * ${o.headDim}u + 8u * c;
  return array<vec4<f32>, 2>(bitcast<vec4<f32>>(${quad('w')}), bitcast<vec4<f32>>(${quad('w + 4u')}));
}
`;
  },
  wgslStore(o) {
    const { v, wgsl } = unscaledStorePrelude(this, o);
    return /* wgsl */ `${wgsl}
fn kv_store_chunk(slab: u32, t: u32, c: u32, scale: f32) {
  let w = slab + t * ${o.headDim}u + 4u * c;
  for (var j = 0u; j < 4u; j++) { ${v}[w + j] = bitcast<u32>(kv_src(4u * c + j)); }
}
`;
  },
  encodeRow(cache, slabStart, t, row) {
    const base = slabStart + t * row.length;
    const f = new Float32Array(cache.buffer, cache.byteOffset, cache.length);
    for (let i = 0; i < row.length; i++) f[base + i] = row[i]!;
  },
  decodeRow(cache, slabStart, t, out) {
    const base = slabStart + t * out.length;
    const f = new Float32Array(cache.buffer, cache.byteOffset, cache.length);
    for (let i = 0; i < out.length; i++) out[i] = f[base + i]!;
  },
};

/**
 * IEEE half floats packed two per word with `pack2x16float` (element `2i` in the low half), so
 * kernels run without the `shader-f16` feature; arithmetic stays f32.
 */
export const f16Format: KvFormat = {
  name: 'f16',
  rowScaled: false,
  storeChunk: 4,
  rowWords: (headDim) => headDim / 2,
  scaleWordsPerSlab: () => 0,
  supportsHeadDim: multipleOf(8),
  wgslLoad(o) {
    checkHeadDim(this, o.headDim, 8);
    const quad = quadRead(o);
    const word = wordRead(o);
    const rw = o.headDim / 2;
    return /* wgsl */ `${f16UnpackWgsl(o.f16Unpack)}
fn kv_load4(slab: u32, t: u32, q: u32) -> vec4<f32> {
  let w = slab + t * ${rw}u + 2u * q;
  return vec4<f32>(unpack2x16float(${word('w')}), unpack2x16float(${word('w + 1u')}));
}
fn kv_load8(slab: u32, t: u32, c: u32) -> array<vec4<f32>, 2> {
  return kv_unpack8(${quad(`slab + t * ${rw}u + 4u * c`)});
}
`;
  },
  wgslStore(o) {
    const { v, wgsl } = unscaledStorePrelude(this, o);
    return /* wgsl */ `${wgsl}
fn kv_store_chunk(slab: u32, t: u32, c: u32, scale: f32) {
  let w = slab + t * ${o.headDim / 2}u + 2u * c;
  ${v}[w] = pack2x16float(vec2<f32>(kv_src(4u * c), kv_src(4u * c + 1u)));
  ${v}[w + 1u] = pack2x16float(vec2<f32>(kv_src(4u * c + 2u), kv_src(4u * c + 3u)));
}
`;
  },
  encodeRow(cache, slabStart, t, row) {
    const base = slabStart + (t * row.length) / 2;
    for (let i = 0; i < row.length; i += 2) {
      cache[base + i / 2] = (f32ToF16Bits(row[i]!) | (f32ToF16Bits(row[i + 1]!) << 16)) >>> 0;
    }
  },
  decodeRow(cache, slabStart, t, out) {
    const base = slabStart + (t * out.length) / 2;
    for (let i = 0; i < out.length; i += 2) {
      const w = cache[base + i / 2]!;
      out[i] = f16BitsToF32(w & 0xffff);
      out[i + 1] = f16BitsToF32(w >>> 16);
    }
  },
};
