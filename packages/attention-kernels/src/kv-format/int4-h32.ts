// int4-h32: int4 groups of 32 after a 32-channel Walsh–Hadamard rotation. Why rotate, and how
// encoding and decoding stay bit-exact between the CPU and the GPU: see int8-h8.ts.

import { bitsToF32, hadamardF32, wgslHadamard, wgslInt4 } from '@kvasir/quantizer';
import {
  checkHeadDim,
  multipleOf,
  needBlockSize,
  quadRead,
  roundUp4,
  storeTarget,
  wordRead,
} from './helpers.js';
import { INT4_KV_GROUP, int4EncodeRow, wgslInt4StoreGroup } from './int4.js';
import type { KvFormat } from './types.js';

/**
 * WGSL: the stages of a 32-point Walsh–Hadamard transform across the 8 vectors `y` of a group
 * (distances 8 and 16 elements), after each 8-element half pair went through `kq_fwht8`.
 */
const FWHT32_CROSS_STAGES = `  for (var d = 2u; d < 8u; d *= 2u) {
    for (var i = 0u; i < 8u; i += 2u * d) {
      for (var j = i; j < i + d; j++) {
        let p = y[j];
        let r = y[j + d];
        y[j] = p + r;
        y[j + d] = p - r;
      }
    }
  }
`;

/**
 * Asymmetric int4 in groups of 32 along the head dimension, each group rotated by a 32-channel
 * Walsh–Hadamard transform before it is quantized: the same words as `int4-g32` (8 codes per
 * word, then per token a (f32 scale, f32 integer zero point) pair per group), 0.375× the bytes
 * of f16. One store chunk is one group, so no row reduction is needed.
 *
 * `kv_load8` of elements `8a .. 8a+7` of a group needs all 32 codes of the group (one aligned
 * `vec4<u32>`): the 32-point transform is the 4-point one across the group's words times the
 * 8-point one inside a word, both on integer codes (exact); the zero point only shifts element 0
 * of the group (the transform of a constant), and one product applies `scale / 32`.
 */
export const int4H32KvFormat: KvFormat = {
  name: 'int4-g32-h32',
  rotation: INT4_KV_GROUP,
  rowScaled: false,
  storeChunk: INT4_KV_GROUP,
  rowWords: (headDim) => headDim / 8,
  scaleWordsPerSlab: (blockSize, headDim) => roundUp4((blockSize * 2 * headDim) / INT4_KV_GROUP),
  supportsHeadDim: multipleOf(INT4_KV_GROUP),
  wgslLoad(o) {
    checkHeadDim(this, o.headDim, INT4_KV_GROUP);
    const word = wordRead(o);
    const quad = quadRead(o);
    const rw = o.headDim / 8;
    const sw = (2 * o.headDim) / INT4_KV_GROUP;
    return /* wgsl */ `${wgslHadamard()}
fn kv_nibbles(w: u32) -> array<vec4<f32>, 2> {
  let sh = vec4<u32>(0u, 4u, 8u, 12u);
  return array<vec4<f32>, 2>(vec4<f32>((vec4<u32>(w) >> sh) & vec4<u32>(15u)),
                             vec4<f32>((vec4<u32>(w) >> (sh + 16u)) & vec4<u32>(15u)));
}
fn kv_load8(slab: u32, t: u32, c: u32) -> array<vec4<f32>, 2> {
  let g = c / 4u;
  let a = c & 3u;
  let q = ${quad(`slab + t * ${rw}u + 4u * g`)};
  let n0 = kv_nibbles(q.x);
  let n1 = kv_nibbles(q.y);
  let n2 = kv_nibbles(q.z);
  let n3 = kv_nibbles(q.w);
  // Row a of the 4-point transform across the words: sign (-1)^popcount(a & word).
  let s1 = select(1.0, -1.0, (a & 1u) != 0u);
  let s2 = select(1.0, -1.0, (a & 2u) != 0u);
  let s3 = s1 * s2;
  let h = kq_fwht8(n0[0] + s1 * n1[0] + s2 * n2[0] + s3 * n3[0],
                   n0[1] + s1 * n1[1] + s2 * n2[1] + s3 * n3[1]);
  let sz = slab + ${o.blockSize * rw}u + t * ${sw}u + 2u * g;
  let s = bitcast<f32>(${word('sz')}) * 0.03125;
  let shift = select(0.0, 32.0 * bitcast<f32>(${word('sz + 1u')}), a == 0u);
  return array<vec4<f32>, 2>((h[0] - vec4<f32>(shift, 0.0, 0.0, 0.0)) * s, h[1] * s);
}
fn kv_load4(slab: u32, t: u32, q: u32) -> vec4<f32> {
  let h = kv_load8(slab, t, q / 2u);
  return select(h[0], h[1], (q & 1u) == 1u);
}
fn kv_load8_rotated(slab: u32, t: u32, c: u32) -> array<vec4<f32>, 2> {
  let g = c / 4u;
  let w = ${word(`slab + t * ${rw}u + c`)};
  let sz = slab + ${o.blockSize * rw}u + t * ${sw}u + 2u * g;
  let s = bitcast<f32>(${word('sz')});
  let z = vec4<f32>(bitcast<f32>(${word('sz + 1u')}));
  let n = kv_nibbles(w);
  return array<vec4<f32>, 2>((n[0] - z) * s, (n[1] - z) * s);
}
fn kv_rot(x: array<vec4<f32>, 8>) -> array<vec4<f32>, 8> {
  var y: array<vec4<f32>, 8>;
  for (var k = 0u; k < 4u; k++) {
    let h = kq_fwht8(x[2u * k], x[2u * k + 1u]);
    y[2u * k] = h[0];
    y[2u * k + 1u] = h[1];
  }
${FWHT32_CROSS_STAGES}  return y;
}
`;
  },
  wgslStore(o) {
    checkHeadDim(this, o.headDim, INT4_KV_GROUP);
    const v = storeTarget(o, this.name);
    const rw = o.headDim / 8;
    const sw = (2 * o.headDim) / INT4_KV_GROUP;
    const src = (k: number): string => `kv_src(e + ${k}u)`;
    // y[2k], y[2k + 1] hold elements 8k .. 8k+7 of the group; the stages at distances 8 and 16
    // pair vectors as hadamardF32 pairs elements, so the sums are the same f32 operations.
    return /* wgsl */ `${wgslInt4()}${wgslHadamard()}
const KV_STORE_CHUNK: u32 = ${INT4_KV_GROUP}u;
fn kv_row_scale(absmax: f32) -> f32 { return 1.0; }
fn kv_store_scale(slab: u32, t: u32, scale: f32) {}
fn kv_store_chunk(slab: u32, t: u32, c: u32, unused_scale: f32) {
  var y: array<vec4<f32>, 8>;
  for (var k = 0u; k < 4u; k++) {
    let e = c * ${INT4_KV_GROUP}u + 8u * k;
    let h = kq_fwht8(vec4<f32>(${src(0)}, ${src(1)}, ${src(2)}, ${src(3)}),
                     vec4<f32>(${src(4)}, ${src(5)}, ${src(6)}, ${src(7)}));
    y[2u * k] = h[0];
    y[2u * k + 1u] = h[1];
  }
${FWHT32_CROSS_STAGES}${wgslInt4StoreGroup(v, (j) => `y[(${j}) / 4u][(${j}) % 4u]`, `slab + t * ${rw}u + ${INT4_KV_GROUP / 8}u * c`, `slab + ${o.blockSize * rw}u + t * ${sw}u + 2u * c`)}
}
`;
  },
  encodeRow(cache, slabStart, t, row, blockSize) {
    const y = Float32Array.from(row);
    hadamardF32(y, INT4_KV_GROUP);
    int4EncodeRow(cache, slabStart, t, y, blockSize);
  },
  decodeRow(cache, slabStart, t, out, blockSize) {
    const b = needBlockSize(this.name, blockSize);
    const d = out.length;
    const rw = d / 8;
    const sw = (2 * d) / INT4_KV_GROUP;
    const h = new Float32Array(8);
    for (let c = 0; c < d / 8; c++) {
      const g = c >> 2;
      const a = c & 3;
      const words = slabStart + t * rw + 4 * g;
      for (let j = 0; j < 8; j++) {
        let sum = 0;
        for (let k = 0; k < 4; k++) {
          const q = (cache[words + k]! >>> (4 * j)) & 15;
          sum += popcountParity(a & k) ? -q : q;
        }
        h[j] = sum;
      }
      hadamardF32(h, 8);
      const sz = slabStart + b * rw + t * sw + 2 * g;
      const s = Math.fround(bitsToF32(cache[sz]!) * 0.03125);
      if (a === 0) h[0] = Math.fround(h[0]! - 32 * bitsToF32(cache[sz + 1]!));
      for (let j = 0; j < 8; j++) out[8 * c + j] = Math.fround(h[j]! * s);
    }
  },
};

/** True when `x` (0..3) has an odd number of set bits. */
function popcountParity(x: number): boolean {
  return ((x ^ (x >> 1)) & 1) === 1;
}
