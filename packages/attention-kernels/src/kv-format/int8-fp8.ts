// The 8-bit KV formats with a dynamic scale per (token, head): int8, OCP fp8 E4M3 and E5M2,
// built on @kvasir/quantizer's codecs so the CPU twins and the WGSL agree bit for bit.
// Scales live in each slab's last words (see the cache layout), so copy-on-write, swap and
// offload move them with the block.

import {
  bitsToF32,
  decodeFloatBits,
  encodeFloatBits,
  FLOAT_FORMATS,
  f32ToBits,
  int8Decode,
  int8Encode,
  inverseScale,
  scaleFromAmax,
  wgslFloatCodec,
  wgslInt8,
  wgslPrefix,
  wgslQmaxRecip,
  wgslScaleHelpers,
} from '@kvasir/quantizer';
import {
  checkHeadDim,
  multipleOf,
  needBlockSize,
  roundUp4,
  rowAmax,
  storeTarget,
  wordRead,
} from './helpers.js';
import type { Fp8, KvFormat } from './types.js';

/**
 * An 8-bit format with one f32 scale per (token, head), computed at write time from the row's
 * absolute maximum: 4 codes per word (element `4i + j` in byte `j` of word `i`), then the slab's
 * `blockSize` scale words (padded to a multiple of 4).
 */
function byteFormat(name: 'int8' | Fp8): KvFormat {
  const isInt = name === 'int8';
  const fs = isInt ? undefined : FLOAT_FORMATS[name];
  const prefix = isInt ? '' : wgslPrefix(name);
  const lib = isInt ? wgslInt8() : `${wgslScaleHelpers()}${wgslFloatCodec(name)}`;
  const decodeByte = (b: string, s: string): string =>
    isInt ? `int8_decode(${b}, ${s})` : `${prefix}_decode(${b}) * ${s}`;
  const unpack4 = isInt
    ? ''
    : `
fn kv_fp8_unpack4(w: u32, s: f32) -> vec4<f32> {
  return vec4<f32>(${decodeByte('w & 0xffu', 's')}, ${decodeByte('(w >> 8u) & 0xffu', 's')},
                   ${decodeByte('(w >> 16u) & 0xffu', 's')}, ${decodeByte('w >> 24u', 's')});
}
`;
  const unpack = isInt ? 'int8_unpack4' : 'kv_fp8_unpack4';
  const encode = (x: string): string =>
    isInt ? `int8_encode(${x}, inv)` : `${prefix}_encode(${x} * inv)`;
  const fmt: KvFormat = {
    name,
    rowScaled: true,
    storeChunk: 4,
    rowWords: (headDim) => headDim / 4,
    scaleWordsPerSlab: (blockSize) => roundUp4(blockSize),
    supportsHeadDim: multipleOf(8),
    wgslLoad(o) {
      checkHeadDim(this, o.headDim, 8);
      const word = wordRead(o);
      const rw = o.headDim / 4;
      return /* wgsl */ `${lib}${unpack4}
fn kv_scale(slab: u32, t: u32) -> f32 {
  return bitcast<f32>(${word(`slab + ${o.blockSize * rw}u + t`)});
}
fn kv_load4(slab: u32, t: u32, q: u32) -> vec4<f32> {
  return ${unpack}(${word(`slab + t * ${rw}u + q`)}, kv_scale(slab, t));
}
${
  // Rows of a multiple of 4 words start on a vec4 (slabs are multiples of 4 words too): one
  // 16-byte load serves both words of a chunk, instead of two dynamically indexed ones.
  (o.cacheElement ?? 'vec4<u32>') === 'vec4<u32>' && rw % 4 === 0
    ? `fn kv_load8(slab: u32, t: u32, c: u32) -> array<vec4<f32>, 2> {
  let s = kv_scale(slab, t);
  let q = ${o.cacheVar ?? 'kv'}[((slab + t * ${rw}u) >> 2u) + (c >> 1u)];
  let odd = (c & 1u) == 1u;
  return array<vec4<f32>, 2>(${unpack}(select(q.x, q.z, odd), s), ${unpack}(select(q.y, q.w, odd), s));
}`
    : `fn kv_load8(slab: u32, t: u32, c: u32) -> array<vec4<f32>, 2> {
  let s = kv_scale(slab, t);
  let w = slab + t * ${rw}u + 2u * c;
  return array<vec4<f32>, 2>(${unpack}(${word('w')}, s), ${unpack}(${word('w + 1u')}, s));
}`
}
`;
    },
    wgslStore(o) {
      checkHeadDim(this, o.headDim, 8);
      const v = storeTarget(o, name);
      const rw = o.headDim / 4;
      return /* wgsl */ `${lib}
const KV_STORE_CHUNK: u32 = 4u;
fn kv_row_scale(absmax: f32) -> f32 {
  return kq_scale_from_amax(absmax, ${wgslQmaxRecip(name)});
}
fn kv_store_scale(slab: u32, t: u32, scale: f32) {
  ${v}[slab + ${o.blockSize * rw}u + t] = bitcast<u32>(scale);
}
fn kv_store_chunk(slab: u32, t: u32, c: u32, scale: f32) {
  let inv = kq_inverse_scale(scale);
  ${v}[slab + t * ${rw}u + c] = ${encode('kv_src(4u * c)')} | (${encode('kv_src(4u * c + 1u)')} << 8u) |
    (${encode('kv_src(4u * c + 2u)')} << 16u) | (${encode('kv_src(4u * c + 3u)')} << 24u);
}
`;
    },
    encodeRow(cache, slabStart, t, row, blockSize) {
      const rw = row.length / 4;
      const scale = scaleFromAmax(name, rowAmax(row));
      const inv = inverseScale(scale);
      cache[slabStart + blockSize * rw + t] = f32ToBits(scale);
      const base = slabStart + t * rw;
      for (let i = 0; i < rw; i++) {
        let w = 0;
        for (let j = 0; j < 4; j++) {
          const x = row[4 * i + j]!;
          const code =
            fs === undefined ? int8Encode(x, inv) & 0xff : encodeFloatBits(fs, f32ToBits(x * inv));
          w |= code << (8 * j);
        }
        cache[base + i] = w >>> 0;
      }
    },
    decodeRow(cache, slabStart, t, out, blockSize) {
      const rw = out.length / 4;
      const scale = bitsToF32(cache[slabStart + needBlockSize(name, blockSize) * rw + t]!);
      const base = slabStart + t * rw;
      for (let i = 0; i < rw; i++) {
        const w = cache[base + i]!;
        for (let j = 0; j < 4; j++) {
          const b = (w >>> (8 * j)) & 0xff;
          out[4 * i + j] =
            fs === undefined
              ? int8Decode((b << 24) >> 24, scale)
              : bitsToF32(decodeFloatBits(fs, b)) * scale;
        }
      }
    },
  };
  return fmt;
}

/** Symmetric int8, one dynamic f32 scale per (token, head): 0.516× the bytes of f16 at head dim 128. */
export const int8KvFormat: KvFormat = byteFormat('int8');
/** OCP FP8 E4M3 (max 448), one dynamic f32 scale per (token, head). */
export const fp8E4m3KvFormat: KvFormat = byteFormat('fp8-e4m3');
/** OCP FP8 E5M2 (max 57344), one dynamic f32 scale per (token, head). */
export const fp8E5m2KvFormat: KvFormat = byteFormat('fp8-e5m2');
