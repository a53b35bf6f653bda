// Helpers shared by the KV formats (not part of the public API): how a format's WGSL reads and
// writes the cache binding it is given, and the checks every format makes.

import { AttentionKernelError } from '../errors.js';
import type { KvFormat, KvWgslOptions } from './types.js';

/** `n` rounded up to a multiple of 4 (slab scale areas keep rows 16-byte aligned). */
export const roundUp4 = (n: number): number => Math.ceil(n / 4) * 4;

/** One word `w` of the cache binding, as a `u32` expression. */
export function wordRead(o: KvWgslOptions): (w: string) => string {
  const v = o.cacheVar ?? 'kv';
  return (o.cacheElement ?? 'vec4<u32>') === 'vec4<u32>'
    ? (w) => `${v}[(${w}) >> 2u][(${w}) & 3u]`
    : (w) => `${v}[${w}]`;
}

/** Four consecutive words starting at a 4-word-aligned word `w`, as one `vec4<u32>`. */
export function quadRead(o: KvWgslOptions): (w: string) => string {
  const v = o.cacheVar ?? 'kv';
  if ((o.cacheElement ?? 'vec4<u32>') === 'vec4<u32>') return (w) => `${v}[(${w}) >> 2u]`;
  return (w) => `vec4<u32>(${v}[${w}], ${v}[(${w}) + 1u], ${v}[(${w}) + 2u], ${v}[(${w}) + 3u])`;
}

/**
 * The cache variable a format's stores write.
 *
 * @throws {AttentionKernelError} `INVALID_ARGUMENT` unless the binding is `array<u32>`.
 */
export function storeTarget(o: KvWgslOptions, name: string): string {
  if ((o.cacheElement ?? 'u32') !== 'u32') {
    throw new AttentionKernelError(
      'INVALID_ARGUMENT',
      `${name} stores need an array<u32> cache binding.`,
    );
  }
  return o.cacheVar ?? 'kv';
}

/**
 * @throws {AttentionKernelError} `UNSUPPORTED_HEAD_DIM` when `format` has no kernel for `headDim`
 *   (`multiple` names what it needs in the message).
 */
export function checkHeadDim(format: KvFormat, headDim: number, multiple: number): void {
  if (!format.supportsHeadDim(headDim)) {
    throw new AttentionKernelError(
      'UNSUPPORTED_HEAD_DIM',
      `KV format ${format.name} has no kernel for head dim ${headDim} (needs a positive multiple of ${multiple}).`,
      { details: { headDim, format: format.name } },
    );
  }
}

/** A `supportsHeadDim` test: positive multiples of `m`. */
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

/**
 * @throws {AttentionKernelError} `INVALID_ARGUMENT` when `blockSize` is missing: a format whose
 *   scales sit after the slab's rows cannot find them without it.
 */
export function needBlockSize(name: string, blockSize: number | undefined): number {
  if (blockSize === undefined) {
    throw new AttentionKernelError(
      'INVALID_ARGUMENT',
      `${name} rows need blockSize to find their scales.`,
    );
  }
  return blockSize;
}

/**
 * The start of an unscaled format's store functions: checks the head dim and the cache binding
 * type, and returns the cache variable plus the scale hooks that do nothing for such formats.
 */
export function unscaledStorePrelude(
  format: KvFormat,
  o: KvWgslOptions,
): { v: string; wgsl: string } {
  checkHeadDim(format, o.headDim, 8);
  return {
    v: storeTarget(o, format.name),
    wgsl: /* wgsl */ `
const KV_STORE_CHUNK: u32 = 4u;
fn kv_row_scale(absmax: f32) -> f32 { return 1.0; }
fn kv_store_scale(slab: u32, t: u32, scale: f32) {}`,
  };
}
