import { createHash } from 'node:crypto';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { hashBlock, rootHash, sha256 } from './hash.js';

function hex(words: Uint32Array): string {
  return Array.from(words, (w) => w.toString(16).padStart(8, '0')).join('');
}

describe('block hashing', () => {
  it('implements SHA-256 exactly (checked against node:crypto)', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 300 }), (bytes) => {
        const expected = createHash('sha256').update(bytes).digest('hex');
        expect(hex(sha256(bytes))).toBe(expected);
      }),
      { numRuns: 300 },
    );
  });

  it('hashes a block as SHA-256(parent ‖ tokens as u32 LE), first 128 bits', () => {
    const parent = rootHash('seed');
    const tokens = [1, 2, 3, 0xffffffff];
    const buf = Buffer.alloc(16 + 16);
    Buffer.from(parent, 'hex').copy(buf, 0);
    tokens.forEach((t, i) => {
      buf.writeUInt32LE(t, 16 + 4 * i);
    });
    const expected = createHash('sha256').update(buf).digest('hex').slice(0, 32);
    expect(hashBlock(parent, tokens, 0, 4)).toBe(expected);
  });

  it('changes with the parent, the tokens, and the extra keys', () => {
    const a = rootHash('s');
    const b = rootHash('s', { modelId: 'm' });
    const c = rootHash('s', { modelId: 'm', adapterId: 'lora-1' });
    const d = rootHash('s', { cacheSalt: 'tenant-2' });
    expect(new Set([a, b, c, d]).size).toBe(4);
    // Key order does not matter, values do.
    expect(rootHash('s', { adapterId: 'lora-1', modelId: 'm' })).toBe(c);
    expect(rootHash('s', { epoch: 1 })).not.toBe(rootHash('s', { epoch: '1' }));
    const tokens = [5, 6, 7, 8];
    expect(hashBlock(a, tokens, 0, 4)).not.toBe(hashBlock(b, tokens, 0, 4));
    expect(hashBlock(a, tokens, 0, 4)).not.toBe(hashBlock(a, [5, 6, 7, 9], 0, 4));
    expect(hashBlock(a, tokens, 0, 4)).toBe(hashBlock(a, [9, 5, 6, 7, 8], 1, 4));
  });

  it('rejects token ids that are not u32 integers', () => {
    const root = rootHash('s');
    expect(() => hashBlock(root, [1, 2.5], 0, 2)).toThrow(/token id/);
    expect(() => hashBlock(root, [-1], 0, 1)).toThrow(/token id/);
    expect(() => hashBlock(root, [2 ** 32], 0, 1)).toThrow(/token id/);
  });
});
