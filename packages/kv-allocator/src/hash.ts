// Block hashing for prefix caching: SHA-256 truncated to 128 bits, written out here so the
// package has no run-time dependency and gives the same hashes in Node and browsers.
// Collision bound: with n cached blocks the birthday probability is about n² / 2^129
// (10^9 blocks: below 10^-20), so equal hashes are treated as equal content.

import { KvAllocatorError } from './errors.js';
import type { BlockHash, ExtraKeys } from './types.js';

const K = new Uint32Array([
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
  0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
  0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
  0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
  0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
  0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
  0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
  0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
]);
const IV = new Uint32Array([
  0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
]);

const W = new Uint32Array(64);
const H = new Uint32Array(8);

function compress(block: DataView, offset: number): void {
  for (let i = 0; i < 16; i++) W[i] = block.getUint32(offset + i * 4, false);
  for (let i = 16; i < 64; i++) {
    const w15 = W[i - 15]!;
    const w2 = W[i - 2]!;
    const s0 = ((w15 >>> 7) | (w15 << 25)) ^ ((w15 >>> 18) | (w15 << 14)) ^ (w15 >>> 3);
    const s1 = ((w2 >>> 17) | (w2 << 15)) ^ ((w2 >>> 19) | (w2 << 13)) ^ (w2 >>> 10);
    W[i] = (W[i - 16]! + s0 + W[i - 7]! + s1) | 0;
  }
  let a = H[0]!;
  let b = H[1]!;
  let c = H[2]!;
  let d = H[3]!;
  let e = H[4]!;
  let f = H[5]!;
  let g = H[6]!;
  let h = H[7]!;
  for (let i = 0; i < 64; i++) {
    const S1 = ((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^ ((e >>> 25) | (e << 7));
    const ch = (e & f) ^ (~e & g);
    const t1 = (h + S1 + ch + K[i]! + W[i]!) | 0;
    const S0 = ((a >>> 2) | (a << 30)) ^ ((a >>> 13) | (a << 19)) ^ ((a >>> 22) | (a << 10));
    const maj = (a & b) ^ (a & c) ^ (b & c);
    const t2 = (S0 + maj) | 0;
    h = g;
    g = f;
    f = e;
    e = (d + t1) | 0;
    d = c;
    c = b;
    b = a;
    a = (t1 + t2) | 0;
  }
  H[0] = (H[0]! + a) | 0;
  H[1] = (H[1]! + b) | 0;
  H[2] = (H[2]! + c) | 0;
  H[3] = (H[3]! + d) | 0;
  H[4] = (H[4]! + e) | 0;
  H[5] = (H[5]! + f) | 0;
  H[6] = (H[6]! + g) | 0;
  H[7] = (H[7]! + h) | 0;
}

let scratch = new Uint8Array(256);

/** SHA-256 of `data`, as 8 big-endian words. Exported for tests against other implementations. */
export function sha256(data: Uint8Array): Uint32Array {
  const len = data.length;
  const padded = Math.ceil((len + 9) / 64) * 64;
  if (scratch.length < padded) scratch = new Uint8Array(padded * 2);
  scratch.set(data);
  scratch.fill(0, len, padded);
  scratch[len] = 0x80;
  const view = new DataView(scratch.buffer, 0, padded);
  view.setUint32(padded - 4, (len * 8) >>> 0, false);
  view.setUint32(padded - 8, Math.floor((len * 8) / 2 ** 32), false);
  H.set(IV);
  for (let off = 0; off < padded; off += 64) compress(view, off);
  return new Uint32Array(H);
}

const HEX: string[] = Array.from({ length: 256 }, (_, i) => i.toString(16).padStart(2, '0'));

function wordsToHex(words: Uint32Array, count: number): string {
  let s = '';
  for (let i = 0; i < count; i++) {
    const w = words[i]!;
    s += HEX[w >>> 24]! + HEX[(w >>> 16) & 0xff]! + HEX[(w >>> 8) & 0xff]! + HEX[w & 0xff]!;
  }
  return s;
}

const encoder = new TextEncoder();

/**
 * Root of a hash chain: the parent of a sequence's first block. Mixes a seed with the extra
 * keys (model, adapter, cache salt), so every block hash of the chain depends on them.
 */
export function rootHash(seed: string, extraKeys?: ExtraKeys): BlockHash {
  let text = `kvasir-block-hash-v1\u0000${seed}`;
  if (extraKeys) {
    for (const key of Object.keys(extraKeys).sort()) {
      const v = extraKeys[key];
      if (v !== undefined) text += `\u0000${key}=${typeof v}:${String(v)}`;
    }
  }
  return wordsToHex(sha256(encoder.encode(text)), 4);
}

let blockInput = new Uint8Array(16 + 4 * 64);

/**
 * Hash of one full block: SHA-256(parent hash ‖ token ids as u32 little-endian), first 128 bits.
 * @throws {KvAllocatorError} INVALID_TOKEN for a token id that is not an integer in [0, 2^32).
 */
export function hashBlock(
  parent: BlockHash,
  tokens: ArrayLike<number>,
  start: number,
  count: number,
): BlockHash {
  const bytes = 16 + 4 * count;
  if (blockInput.length < bytes) blockInput = new Uint8Array(bytes);
  for (let i = 0; i < 16; i++) blockInput[i] = Number.parseInt(parent.substr(i * 2, 2), 16);
  const view = new DataView(blockInput.buffer);
  for (let i = 0; i < count; i++) {
    const t = tokens[start + i]!;
    if (!Number.isInteger(t) || t < 0 || t > 0xffffffff) {
      throw new KvAllocatorError('INVALID_TOKEN', `token id ${String(t)} is not a u32 integer`, {
        details: { index: start + i, token: t },
      });
    }
    view.setUint32(16 + 4 * i, t, true);
  }
  return wordsToHex(sha256(blockInput.subarray(0, bytes)), 4);
}
