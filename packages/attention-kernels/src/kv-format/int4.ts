// Asymmetric int4 KV rows in groups of 32 with a scale and zero point per group; the group
// encoder and its WGSL twin are shared with the rotated int4-h32 format.

import {
  bitsToF32,
  f32ToBits,
  int4Decode,
  int4Encode,
  int4GroupParams,
  wgslInt4,
} from '@kvasir/quantizer';
import {
  checkHeadDim,
  multipleOf,
  needBlockSize,
  roundUp4,
  storeTarget,
  wordRead,
} from './helpers.js';
import type { KvFormat } from './types.js';

/** Elements per int4 scale group along the head dimension. */
export const INT4_KV_GROUP = 32;

/**
 * Encodes `row` (its length a multiple of {@link INT4_KV_GROUP}) as int4 groups into token `t`
 * of the slab at `slabStart`: codes first (`headDim / 8` words per token), then per token a
 * (scale, zero point) word pair per group after the slab's `blockSize` rows. NaN and infinities
 * do not set a group's range.
 */
export function int4EncodeRow(
  cache: Uint32Array,
  slabStart: number,
  t: number,
  row: Float32Array,
  blockSize: number,
): void {
  const d = row.length;
  const rw = d / 8;
  const sw = (2 * d) / INT4_KV_GROUP;
  for (let g = 0; g < d / INT4_KV_GROUP; g++) {
    const { scale, inv, zero } = int4GroupParams(row, g * INT4_KV_GROUP, (g + 1) * INT4_KV_GROUP);
    const s = slabStart + blockSize * rw + t * sw + 2 * g;
    cache[s] = f32ToBits(scale);
    cache[s + 1] = f32ToBits(zero);
    for (let k = 0; k < INT4_KV_GROUP / 8; k++) {
      let w = 0;
      for (let j = 0; j < 8; j++) {
        w |= int4Encode(row[g * INT4_KV_GROUP + 8 * k + j]!, inv, zero) << (4 * j);
      }
      cache[slabStart + t * rw + (INT4_KV_GROUP / 8) * g + k] = w >>> 0;
    }
  }
}

/**
 * WGSL statements that quantize one int4 group, the twin of {@link int4EncodeRow}'s group:
 * `elem(j)` is the WGSL expression of element `j` (a `u32` expression) of the group,
 * `codeWord` / `scaleWord` the first code word and the (scale, zero point) word pair, stored
 * into the cache binding `v`. Needs `wgslInt4()`.
 */
export function wgslInt4StoreGroup(
  v: string,
  elem: (j: string) => string,
  codeWord: string,
  scaleWord: string,
): string {
  return /* wgsl */ `
  var lo = 0.0;
  var hi = 0.0;
  var seen = false;
  for (var j = 0u; j < ${INT4_KV_GROUP}u; j++) {
    let x = ${elem('j')};
    if (kq_is_finite(x)) {
      if (!seen) { lo = x; hi = x; seen = true; }
      lo = min(lo, x);
      hi = max(hi, x);
    }
  }
  let scale = int4_scale_from_range(lo, hi);
  let inv = kq_inverse_scale(scale);
  let zero = int4_zero_point(lo, inv);
  let sw = ${scaleWord};
  ${v}[sw] = bitcast<u32>(scale);
  ${v}[sw + 1u] = bitcast<u32>(zero);
  let cw = ${codeWord};
  for (var k = 0u; k < ${INT4_KV_GROUP / 8}u; k++) {
    var w = 0u;
    for (var j = 0u; j < 8u; j++) {
      w = w | (int4_encode(${elem('8u * k + j')}, inv, zero) << (4u * j));
    }
    ${v}[cw + k] = w;
  }`;
}

/**
 * Asymmetric int4 in groups of 32 along the head dimension, each with an f32 scale and an
 * integer zero point (f32): 8 codes per word (element `8i + j` in nibble `j` of word `i`), then
 * per token `headDim / 16` words (scale, zero point per group), padded to a multiple of 4.
 * Each group is quantized by the invocation that writes it, so no row reduction is needed.
 */
export const int4KvFormat: KvFormat = {
  name: 'int4-g32',
  rowScaled: false,
  storeChunk: INT4_KV_GROUP,
  rowWords: (headDim) => headDim / 8,
  scaleWordsPerSlab: (blockSize, headDim) => roundUp4((blockSize * 2 * headDim) / INT4_KV_GROUP),
  supportsHeadDim: multipleOf(INT4_KV_GROUP),
  wgslLoad(o) {
    checkHeadDim(this, o.headDim, INT4_KV_GROUP);
    const word = wordRead(o);
    const rw = o.headDim / 8;
    const sw = (2 * o.headDim) / INT4_KV_GROUP;
    return /* wgsl */ `${wgslInt4()}
fn kv_int4_group(slab: u32, t: u32, g: u32) -> vec2<f32> {
  let w = slab + ${o.blockSize * rw}u + t * ${sw}u + 2u * g;
  return vec2<f32>(bitcast<f32>(${word('w')}), bitcast<f32>(${word('w + 1u')}));
}
fn kv_load4(slab: u32, t: u32, q: u32) -> vec4<f32> {
  let sz = kv_int4_group(slab, t, q / 8u);
  return int4_unpack8(${word(`slab + t * ${rw}u + q / 2u`)}, sz.x, sz.y, q & 1u);
}
fn kv_load8(slab: u32, t: u32, c: u32) -> array<vec4<f32>, 2> {
  let sz = kv_int4_group(slab, t, c / 4u);
  let w = ${word(`slab + t * ${rw}u + c`)};
  return array<vec4<f32>, 2>(int4_unpack8(w, sz.x, sz.y, 0u), int4_unpack8(w, sz.x, sz.y, 1u));
}
`;
  },
  wgslStore(o) {
    checkHeadDim(this, o.headDim, INT4_KV_GROUP);
    const v = storeTarget(o, 'int4');
    const rw = o.headDim / 8;
    const sw = (2 * o.headDim) / INT4_KV_GROUP;
    return /* wgsl */ `${wgslInt4()}
const KV_STORE_CHUNK: u32 = ${INT4_KV_GROUP}u;
fn kv_row_scale(absmax: f32) -> f32 { return 1.0; }
fn kv_store_scale(slab: u32, t: u32, scale: f32) {}
fn kv_store_chunk(slab: u32, t: u32, c: u32, unused_scale: f32) {
  let e0 = c * ${INT4_KV_GROUP}u;
${wgslInt4StoreGroup(v, (j) => `kv_src(e0 + ${j})`, `slab + t * ${rw}u + ${INT4_KV_GROUP / 8}u * c`, `slab + ${o.blockSize * rw}u + t * ${sw}u + 2u * c`)}
}
`;
  },
  encodeRow(cache, slabStart, t, row, blockSize) {
    int4EncodeRow(cache, slabStart, t, row, blockSize);
  },
  decodeRow(cache, slabStart, t, out, blockSize) {
    const bs = needBlockSize('int4', blockSize);
    const d = out.length;
    const rw = d / 8;
    const sw = (2 * d) / INT4_KV_GROUP;
    for (let i = 0; i < d; i++) {
      const g = Math.floor(i / INT4_KV_GROUP);
      const s = slabStart + bs * rw + t * sw + 2 * g;
      const q = (cache[slabStart + t * rw + (i >>> 3)]! >>> (4 * (i & 7))) & 15;
      out[i] = int4Decode(q, bitsToF32(cache[s]!), bitsToF32(cache[s + 1]!));
    }
  },
};
