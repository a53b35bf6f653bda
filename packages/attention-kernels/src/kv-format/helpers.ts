// Helpers shared by the quantized KV formats (not part of the public API).

import { f32ToBits, int4Encode, int4GroupParams } from '@kvasir/quantizer';
import { AttentionKernelError } from './errors.js';
import type { KvFormat, KvWgslOptions } from './kv-format.js';

export const roundUp4 = (n: number): number => Math.ceil(n / 4) * 4;

export function wordRead(o: KvWgslOptions): (w: string) => string {
  const v = o.cacheVar ?? 'kv';
  return (o.cacheElement ?? 'vec4<u32>') === 'vec4<u32>'
    ? (w) => `${v}[(${w}) >> 2u][(${w}) & 3u]`
    : (w) => `${v}[${w}]`;
}

export function storeTarget(o: KvWgslOptions, name: string): string {
  if ((o.cacheElement ?? 'u32') !== 'u32') {
    throw new AttentionKernelError(
      'INVALID_ARGUMENT',
      `${name} stores need an array<u32> cache binding.`,
    );
  }
  return o.cacheVar ?? 'kv';
}

export function checkHeadDim(format: KvFormat, headDim: number, multiple: number): void {
  if (!format.supportsHeadDim(headDim)) {
    throw new AttentionKernelError(
      'UNSUPPORTED_HEAD_DIM',
      `KV format ${format.name} has no kernel for head dim ${headDim} (needs a positive multiple of ${multiple}).`,
      { details: { headDim, format: format.name } },
    );
  }
}

export const multipleOf =
  (m: number) =>
  (d: number): boolean =>
    Number.isInteger(d) && d > 0 && d % m === 0;

/**
 * The row's absolute maximum as the GPU writer reduces it: NaN, infinities (and magnitudes of
 * 3e38 or more) do not set the scale.
 */
export function rowAmax(row: Float32Array): number {
  let m = 0;
  for (let i = 0; i < row.length; i++) {
    const a = Math.abs(row[i]!);
    if (a < 3.0e38 && a > m) m = a;
  }
  return m;
}

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
