import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { block } from './testing/fixtures.js';
import { xxh64 } from './xxh64.js';

// Expected digests from an independent implementation (the xxhash-wasm package, 1.1.0), for
// inputs from the test fixture generator; they pin every code path: short inputs (no stripes),
// the 4- and 1-byte tails, exactly one stripe, several chunks of the WebAssembly loop.
const VECTORS: [length: number, seed: number, hex: string][] = [
  [0, 0, 'ef46db3751d8e999'],
  [1, 0, '89f45523b5b446ae'],
  [3, 0, 'cbff65487fda40ac'],
  [4, 7, '6878149173b822e1'],
  [8, 0, 'd388e6262f6666fe'],
  [31, 0, '00e294f9241559ee'],
  [32, 0, 'cdc1f213674a2e11'],
  [33, 1, '8765146a53380ae4'],
  [100, 0, '480755fcf966f570'],
  [4096, 0, '67c140199cd95bda'],
  [65539, 42, 'a932baca7dfd8213'],
  [(1 << 20) + 13, 0, '1f443d9d4a1896a2'],
  [2 << 20, 0, '7891b3de57bf55c1'],
];

describe('xxh64', () => {
  it('matches the reference digests', () => {
    expect(xxh64(Buffer.from('abc')).toString(16)).toBe('44bc2cf5ad770999');
    for (const [n, seed, hex] of VECTORS) {
      expect(
        xxh64(block(n + 1, n), BigInt(seed))
          .toString(16)
          .padStart(16, '0'),
      ).toBe(hex);
    }
  });

  it('hashes a view by its own bytes, wherever it sits in its buffer (property)', () => {
    fc.assert(
      fc.property(
        fc.uint8Array({ maxLength: 300 }),
        fc.integer({ min: 0, max: 7 }),
        (bytes, pad) => {
          const backing = new Uint8Array(bytes.length + pad + 3);
          backing.set(bytes, pad);
          return xxh64(backing.subarray(pad, pad + bytes.length)) === xxh64(bytes);
        },
      ),
    );
  });

  it('changes with any single flipped bit of a long input (property)', () => {
    const data = block(9, 3000);
    const h = xxh64(data);
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: data.length - 1 }),
        fc.integer({ min: 0, max: 7 }),
        (at, bit) => {
          const copy = data.slice();
          copy[at] = (copy[at] ?? 0) ^ (1 << bit);
          return xxh64(copy) !== h;
        },
      ),
      { numRuns: 300 },
    );
  });
});
