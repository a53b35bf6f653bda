// Shared by this package's own tests; not part of the public API.
import { createHash } from 'node:crypto';
import { testBytes } from '../conformance/check.js';
import { kvNamespace } from '../keys.js';

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

/** Deterministic, seed-dependent bytes (the conformance suites' generator). */
export function block(seed: number, size = 1024): Uint8Array {
  return testBytes(seed, size);
}

/** Byte-wise equality (tests only). */
export function sameBytes(a: Uint8Array | undefined, b: Uint8Array | undefined): boolean {
  if (a === undefined || b === undefined) return a === b;
  return Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(
    Buffer.from(b.buffer, b.byteOffset, b.byteLength),
  );
}

/** A version-1 frame (u16 header length, msgpack header with XXH64 as hex, payload) of
// block(1, 40) under NS and key(1), as the version-1 encoder wrote it (hex). */
export const VERSION_1_FRAME =
  '7800de0006a56d61676963a44b565352a17601a26e73d920363063396165393864623436313334343339333738' +
  '6439643364386332623935a36b6579d92038396131613938653730396661363732333734623436336262643864' +
  '35393436a36c656e28a57878683634b0656365383565363061306261653739397235548658c86f6cc4124f3194' +
  'e4b6afc90cd076938c24572f11a572e726191ca3ed7e9f9442f5e7';
