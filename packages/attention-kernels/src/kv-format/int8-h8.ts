// int8-h8, one of the quantized KV formats with a Walsh–Hadamard rotation along the head dimension (QuaRot-style):
// a key's few outlier channels would otherwise set the quantization step of their whole row or
// group; rotated, each outlier is spread over its run of 8 or 32 channels. The rotation needs no
// calibration and no per-layer parameters, so these are plain KvFormats (int4-h32 is the other one): kernels call the same
// kv_load8 / kv_store_chunk and never know a rotation happened.
//
// Encoding rotates in f32 with unnormalized butterflies (additions only, fixed order), so the
// GPU writer and `encodeRow` agree bit for bit. Decoding rotates the integer codes (exact: small
// integers), then multiplies once by `scale / size`, a power-of-two fraction of the scale.

import {
  bitsToF32,
  f32ToBits,
  hadamardF32,
  int8Encode,
  inverseScale,
  scaleFromAmax,
  wgslHadamard,
  wgslInt8,
  wgslQmaxRecip,
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
import type { KvFormat } from './types.js';

const H8_SIZE = 8;

/**
 * Symmetric int8 after an 8-channel Walsh–Hadamard rotation, one f32 scale per (token, head)
 * from the rotated row's absolute maximum. The same words as `int8`: `headDim / 4` code words
 * per token (element `4i + j` of the rotated row in byte `j` of word `i`), then the slab's
 * `blockSize` scale words padded to a multiple of 4: 0.516× the bytes of f16 at head dim 128.
 *
 * The row scale needs the whole rotated row, which no kernel reduction provides (the writer's
 * absmax is of the unrotated row), so each store chunk (8 elements) recomputes the rotated row's
 * absmax itself, in the same order: writes are one token per sequence per step, and a few
 * redundant additions there cost nothing next to attention. Chunk 0 stores the scale.
 */
export const int8H8KvFormat: KvFormat = {
  name: 'int8-h8',
  rotation: H8_SIZE,
  rowScaled: false,
  storeChunk: H8_SIZE,
  rowWords: (headDim) => headDim / 4,
  scaleWordsPerSlab: (blockSize) => roundUp4(blockSize),
  supportsHeadDim: multipleOf(H8_SIZE),
  wgslLoad(o) {
    checkHeadDim(this, o.headDim, H8_SIZE);
    const word = wordRead(o);
    const rw = o.headDim / 4;
    return /* wgsl */ `${wgslInt8()}${wgslHadamard()}
fn kv_load8(slab: u32, t: u32, c: u32) -> array<vec4<f32>, 2> {
  let w = slab + t * ${rw}u + 2u * c;
  // The rotation of integer codes is exact; one product then applies scale / 8.
  let h = kq_fwht8(int8_unpack4(${word('w')}, 1.0), int8_unpack4(${word('w + 1u')}, 1.0));
  let s = bitcast<f32>(${word(`slab + ${o.blockSize * rw}u + t`)}) * 0.125;
  return array<vec4<f32>, 2>(h[0] * s, h[1] * s);
}
fn kv_load8_rotated(slab: u32, t: u32, c: u32) -> array<vec4<f32>, 2> {
  let w = slab + t * ${rw}u + 2u * c;
  let s = bitcast<f32>(${word(`slab + ${o.blockSize * rw}u + t`)});
  return array<vec4<f32>, 2>(int8_unpack4(${word('w')}, s), int8_unpack4(${word('w + 1u')}, s));
}
fn kv_rot(x: array<vec4<f32>, 2>) -> array<vec4<f32>, 2> {
  return kq_fwht8(x[0], x[1]);
}
fn kv_load4(slab: u32, t: u32, q: u32) -> vec4<f32> {
  let h = kv_load8(slab, t, q / 2u);
  return select(h[0], h[1], (q & 1u) == 1u);
}
`;
  },
  wgslStore(o) {
    checkHeadDim(this, o.headDim, H8_SIZE);
    const v = storeTarget(o, this.name);
    const rw = o.headDim / 4;
    const src = (k: number): string => `kv_src(e + ${k}u)`;
    return /* wgsl */ `${wgslInt8()}${wgslHadamard()}
const KV_STORE_CHUNK: u32 = ${H8_SIZE}u;
fn kv_row_scale(absmax: f32) -> f32 { return 1.0; }
fn kv_store_scale(slab: u32, t: u32, scale: f32) {}
fn kv_h8_src(c: u32) -> array<vec4<f32>, 2> {
  let e = ${H8_SIZE}u * c;
  return kq_fwht8(vec4<f32>(${src(0)}, ${src(1)}, ${src(2)}, ${src(3)}),
                  vec4<f32>(${src(4)}, ${src(5)}, ${src(6)}, ${src(7)}));
}
fn kv_h8_amax(m: f32, v: vec4<f32>) -> f32 {
  var r = m;
  for (var j = 0u; j < 4u; j++) {
    let a = abs(v[j]);
    // NaN and infinities must not set the scale (as rowAmax).
    if (a < 3.0e38) { r = max(r, a); }
  }
  return r;
}
fn kv_i8_pack(v: vec4<f32>, inv: f32) -> u32 {
  return int8_encode(v.x, inv) | (int8_encode(v.y, inv) << 8u) | (int8_encode(v.z, inv) << 16u) |
    (int8_encode(v.w, inv) << 24u);
}
fn kv_store_chunk(slab: u32, t: u32, c: u32, unused_scale: f32) {
  var m = 0.0;
  for (var k = 0u; k < ${o.headDim / H8_SIZE}u; k++) {
    let h = kv_h8_src(k);
    m = kv_h8_amax(kv_h8_amax(m, h[0]), h[1]);
  }
  let scale = kq_scale_from_amax(m, ${wgslQmaxRecip('int8')});
  let inv = kq_inverse_scale(scale);
  if (c == 0u) { ${v}[slab + ${o.blockSize * rw}u + t] = bitcast<u32>(scale); }
  let h = kv_h8_src(c);
  let w = slab + t * ${rw}u + 2u * c;
  ${v}[w] = kv_i8_pack(h[0], inv);
  ${v}[w + 1u] = kv_i8_pack(h[1], inv);
}
`;
  },
  encodeRow(cache, slabStart, t, row, blockSize) {
    const rw = row.length / 4;
    const y = Float32Array.from(row);
    hadamardF32(y, H8_SIZE);
    const scale = scaleFromAmax('int8', rowAmax(y));
    const inv = inverseScale(scale);
    cache[slabStart + blockSize * rw + t] = f32ToBits(scale);
    const base = slabStart + t * rw;
    for (let i = 0; i < rw; i++) {
      let w = 0;
      for (let j = 0; j < 4; j++) w |= (int8Encode(y[4 * i + j]!, inv) & 0xff) << (8 * j);
      cache[base + i] = w >>> 0;
    }
  },
  decodeRow(cache, slabStart, t, out, blockSize) {
    const rw = out.length / 4;
    const b = needBlockSize(this.name, blockSize);
    const s = Math.fround(bitsToF32(cache[slabStart + b * rw + t]!) * 0.125);
    const base = slabStart + t * rw;
    const h = new Float32Array(H8_SIZE);
    for (let c = 0; c < out.length / H8_SIZE; c++) {
      for (let j = 0; j < H8_SIZE; j++) {
        const byte = (cache[base + 2 * c + (j >> 2)]! >>> (8 * (j & 3))) & 0xff;
        h[j] = (byte << 24) >> 24;
      }
      hadamardF32(h, H8_SIZE);
      for (let j = 0; j < H8_SIZE; j++) out[H8_SIZE * c + j] = Math.fround(h[j]! * s);
    }
  },
};
