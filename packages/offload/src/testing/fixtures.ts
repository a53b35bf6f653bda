// Shared by this package's own tests; not part of the public API.
import { createHash } from 'node:crypto';
import { kvNamespace } from '../keys';

/** A namespace for tests. */
export const NS = kvNamespace({
  modelId: 'test-model',
  weightDigest: 'sha256:0000',
  kvDtype: 'f16',
  blockSize: 16,
  numLayers: 2,
  numKvHeads: 2,
  headDim: 8,
});

/** A different layout's namespace (another dtype). */
export const OTHER_NS = kvNamespace({
  modelId: 'test-model',
  weightDigest: 'sha256:0000',
  kvDtype: 'int8',
  scaleLayout: 'per-slab-f32',
  blockSize: 16,
  numLayers: 2,
  numKvHeads: 2,
  headDim: 8,
});

/** A deterministic block hash. */
export function key(i: number | string): string {
  return createHash('sha256').update(`block-${i}`).digest('hex').slice(0, 32);
}

/** Deterministic, seed-dependent bytes (a cheap xorshift, so blocks differ everywhere). */
export function block(seed: number, size = 1024): Uint8Array {
  const out = new Uint8Array(size);
  let x = (seed * 2654435761 + 1) >>> 0 || 1;
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

/** Byte-wise equality (tests only). */
export function sameBytes(a: Uint8Array | undefined, b: Uint8Array | undefined): boolean {
  if (a === undefined || b === undefined) return a === b;
  return Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(
    Buffer.from(b.buffer, b.byteOffset, b.byteLength),
  );
}
