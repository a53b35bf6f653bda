import { createHash } from 'node:crypto';
import type { BlockHash } from '@kvasir/kv-allocator';
import { OffloadError } from '../errors.js';

/**
 * One check of a conformance suite: a name and a function that resolves when the subject
 * conforms and rejects (with an `AssertionError` naming what differs) when it does not. Plain
 * functions, so any test runner can run them; `runKvBlockStoreConformance` and
 * `runKvConnectorConformance` register them with vitest.
 */
export interface ConformanceCheck {
  readonly name: string;
  readonly run: () => Promise<void>;
}

/** A deterministic block hash. */
export function testKey(i: number | string): BlockHash {
  return createHash('sha256').update(`conformance-${i}`).digest('hex').slice(0, 32);
}

/** Deterministic, seed-dependent bytes (xorshift: blocks differ everywhere). */
export function testBytes(seed: number | string, size: number): Uint8Array {
  const out = new Uint8Array(size);
  let x = typeof seed === 'number' ? (seed * 2654435761 + 1) >>> 0 || 1 : 1;
  if (typeof seed === 'string')
    for (let i = 0; i < seed.length; i++) x = (x * 31 + seed.charCodeAt(i)) >>> 0 || 1;
  for (let i = 0; i < size; i++) {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    out[i] = x & 0xff;
  }
  return out;
}

/** Byte-wise equality. */
export function sameBytes(a: Uint8Array | undefined, b: Uint8Array | undefined): boolean {
  if (a === undefined || b === undefined) return a === b;
  if (a.byteLength !== b.byteLength) return false;
  for (let i = 0; i < a.byteLength; i++) if (a[i] !== b[i]) return false;
  return true;
}

/** A seeded generator of integers in [0, n). */
export function seeded(seed: number): (n: number) => number {
  let x = (seed * 2654435761 + 7) >>> 0 || 1;
  return (n) => {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    return x % n;
  };
}

/** The `OffloadError` code `p` rejects with; undefined when it resolves. */
export async function codeOf(p: Promise<unknown>): Promise<string | undefined> {
  try {
    await p;
  } catch (e) {
    return OffloadError.isInstance(e) ? e.code : `not an OffloadError: ${String(e)}`;
  }
  return undefined;
}
