// Quantized KV element formats (int8, OCP fp8 E4M3 / E5M2, int4 with group-32 zero points),
// built on @kvasir/quantizer's codecs so the CPU twins and the WGSL agree bit for bit.
// Scales live in each slab's last words (see the cache layout), so copy-on-write, swap and
// offload move them with the block.

import {
  bitsToF32,
  decodeFloatBits,
  encodeFloatBits,
  FLOAT_FORMATS,
  f32ToBits,
  int4Decode,
  int8Decode,
  int8Encode,
  inverseScale,
  scaleFromAmax,
  wgslFloatCodec,
  wgslInt4,
  wgslInt8,
  wgslPrefix,
  wgslQmaxRecip,
  wgslScaleHelpers,
} from '@kvasir/quantizer';
import { AttentionKernelError } from './errors.js';
import type { KvFormat } from './kv-format.js';
import {
  checkHeadDim,
  INT4_KV_GROUP,
  int4EncodeRow,
  multipleOf,
  roundUp4,
  rowAmax,
  storeTarget,
  wgslInt4StoreGroup,
  wordRead,
} from './kv-format-quantized-common.js';
import { int4H32KvFormat, int8H8KvFormat } from './kv-format-quantized-rotated.js';

export { INT4_KV_GROUP } from './kv-format-quantized-common.js';

type Fp8 = 'fp8-e4m3' | 'fp8-e5m2';

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
      if (blockSize === undefined) {
        throw new AttentionKernelError(
          'INVALID_ARGUMENT',
          `${name} rows need blockSize to find their scales.`,
        );
      }
      const scale = bitsToF32(cache[slabStart + blockSize * rw + t]!);
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
    if (blockSize === undefined) {
      throw new AttentionKernelError(
        'INVALID_ARGUMENT',
        'int4 rows need blockSize to find their scales.',
      );
    }
    const d = out.length;
    const rw = d / 8;
    const sw = (2 * d) / INT4_KV_GROUP;
    for (let i = 0; i < d; i++) {
      const g = Math.floor(i / INT4_KV_GROUP);
      const s = slabStart + blockSize * rw + t * sw + 2 * g;
      const q = (cache[slabStart + t * rw + (i >>> 3)]! >>> (4 * (i & 7))) & 15;
      out[i] = int4Decode(q, bitsToF32(cache[s]!), bitsToF32(cache[s + 1]!));
    }
  },
};

/** Static scales of a per-tensor fp8 cache, from `calibrateKv` of @kvasir/quantizer. */
export interface StaticKvScales {
  readonly keyScale: number;
  readonly valueScale: number;
}

/**
 * OCP FP8 with static per-tensor scales (one for K, one for V of the layer), calibrated offline:
 * exactly 1 byte per element, no scale words. The scales are compiled into the kernels (a
 * slab's K/V kind is the parity of its index, `slab / slabWords`), so each distinct pair of
 * scales is its own format (its name carries them) and its own pipelines.
 *
 * @throws {AttentionKernelError} `INVALID_ARGUMENT` for a scale that is not finite and > 0.
 */
export function fp8StaticKvFormat(format: Fp8, scales: StaticKvScales): KvFormat {
  for (const [k, s] of Object.entries(scales)) {
    if (!(Number.isFinite(s) && s > 0)) {
      throw new AttentionKernelError('INVALID_ARGUMENT', `${k} must be finite and > 0, got ${s}.`, {
        details: { [k]: s },
      });
    }
  }
  const fs = FLOAT_FORMATS[format];
  const p = wgslPrefix(format);
  const ks = Math.fround(scales.keyScale);
  const vs = Math.fround(scales.valueScale);
  const kInv = inverseScale(ks);
  const vInv = inverseScale(vs);
  const lit = (x: number): string => `bitcast<f32>(${f32ToBits(x)}u)`;
  const isV = (slabStart: number, blockSize: number, headDim: number): boolean =>
    Math.floor(slabStart / ((blockSize * headDim) / 4)) % 2 === 1;
  const fmt: KvFormat = {
    name: `${format}-static(k=${ks},v=${vs})`,
    rowScaled: false,
    storeChunk: 4,
    rowWords: (headDim) => headDim / 4,
    scaleWordsPerSlab: () => 0,
    supportsHeadDim: multipleOf(8),
    wgslLoad(o) {
      checkHeadDim(this, o.headDim, 8);
      const word = wordRead(o);
      const rw = o.headDim / 4;
      const d = (b: string): string => `${p}_decode(${b}) * s`;
      return /* wgsl */ `${wgslFloatCodec(format)}
fn kv_static_unpack4(w: u32, s: f32) -> vec4<f32> {
  return vec4<f32>(${d('w & 0xffu')}, ${d('(w >> 8u) & 0xffu')}, ${d('(w >> 16u) & 0xffu')}, ${d('w >> 24u')});
}
fn kv_scale(slab: u32) -> f32 {
  return select(${lit(ks)}, ${lit(vs)}, ((slab / ${o.blockSize * rw}u) & 1u) == 1u);
}
fn kv_load4(slab: u32, t: u32, q: u32) -> vec4<f32> {
  return kv_static_unpack4(${word(`slab + t * ${rw}u + q`)}, kv_scale(slab));
}
fn kv_load8(slab: u32, t: u32, c: u32) -> array<vec4<f32>, 2> {
  let s = kv_scale(slab);
  let w = slab + t * ${rw}u + 2u * c;
  return array<vec4<f32>, 2>(kv_static_unpack4(${word('w')}, s), kv_static_unpack4(${word('w + 1u')}, s));
}
`;
    },
    wgslStore(o) {
      checkHeadDim(this, o.headDim, 8);
      const v = storeTarget(o, format);
      const rw = o.headDim / 4;
      const e = (x: string): string => `${p}_encode(${x} * inv)`;
      return /* wgsl */ `${wgslFloatCodec(format)}
const KV_STORE_CHUNK: u32 = 4u;
fn kv_row_scale(absmax: f32) -> f32 { return 1.0; }
fn kv_store_scale(slab: u32, t: u32, scale: f32) {}
fn kv_store_chunk(slab: u32, t: u32, c: u32, unused_scale: f32) {
  let inv = select(${lit(kInv)}, ${lit(vInv)}, ((slab / ${o.blockSize * rw}u) & 1u) == 1u);
  ${v}[slab + t * ${rw}u + c] = ${e('kv_src(4u * c)')} | (${e('kv_src(4u * c + 1u)')} << 8u) |
    (${e('kv_src(4u * c + 2u)')} << 16u) | (${e('kv_src(4u * c + 3u)')} << 24u);
}
`;
    },
    encodeRow(cache, slabStart, t, row, blockSize) {
      const rw = row.length / 4;
      const inv = isV(slabStart, blockSize, row.length) ? vInv : kInv;
      for (let i = 0; i < rw; i++) {
        let w = 0;
        for (let j = 0; j < 4; j++)
          w |= encodeFloatBits(fs, f32ToBits(row[4 * i + j]! * inv)) << (8 * j);
        cache[slabStart + t * rw + i] = w >>> 0;
      }
    },
    decodeRow(cache, slabStart, t, out, blockSize) {
      if (blockSize === undefined) {
        throw new AttentionKernelError(
          'INVALID_ARGUMENT',
          `${format} static rows need blockSize to tell K from V.`,
        );
      }
      const rw = out.length / 4;
      const s = isV(slabStart, blockSize, out.length) ? vs : ks;
      for (let i = 0; i < rw; i++) {
        const w = cache[slabStart + t * rw + i]!;
        for (let j = 0; j < 4; j++)
          out[4 * i + j] = bitsToF32(decodeFloatBits(fs, (w >>> (8 * j)) & 0xff)) * s;
      }
    },
  };
  return fmt;
}

/** The quantized formats with dynamic scales, by name, for registration. */
export const QUANTIZED_KV_FORMATS: readonly KvFormat[] = [
  int8KvFormat,
  fp8E4m3KvFormat,
  fp8E5m2KvFormat,
  int4KvFormat,
  int8H8KvFormat,
  int4H32KvFormat,
];
