// OCP FP8 KV rows with static per-tensor scales (one for K, one for V), calibrated offline.

import {
  bitsToF32,
  decodeFloatBits,
  encodeFloatBits,
  FLOAT_FORMATS,
  f32ToBits,
  inverseScale,
  wgslFloatCodec,
  wgslPrefix,
} from '@kvasir/quantizer';
import { AttentionKernelError } from '../errors.js';
import { checkHeadDim, multipleOf, storeTarget, wordRead } from './helpers.js';
import type { Fp8, KvFormat } from './types.js';

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
