import { KvCacheManager } from '@kvasir/kv-allocator';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { engineChainRoot, promptBlockHashes } from './block-hashes.js';

describe('promptBlockHashes', () => {
  it("equals the hashes a Kvasir engine's cache gives the same prompt (served model name as extra key)", () => {
    fc.assert(
      fc.property(
        fc.array(fc.integer({ min: 0, max: 2 ** 32 - 1 }), { maxLength: 100 }),
        fc.constantFrom(1, 4, 16),
        fc.constantFrom('kvasir-random-tiny', 'kvasir-mini', 'a/b'),
        (tokens, blockSize, model) => {
          // The engine's cache as `kvasir serve` builds it: default seed, extra key modelId.
          const cache = new KvCacheManager({ numBlocks: 8, blockSize, enablePrefixCaching: true });
          const expected = cache.blockHashes(tokens, { modelId: model });
          const got = promptBlockHashes(tokens, blockSize, engineChainRoot(model));
          expect(got).toEqual(expected);
          expect(got).toHaveLength(Math.floor(tokens.length / blockSize));
        },
      ),
      { numRuns: 200 },
    );
  });

  it('gives different chains for different models', () => {
    const tokens = Array.from({ length: 32 }, (_, i) => i);
    expect(promptBlockHashes(tokens, 16, engineChainRoot('a'))[0]).not.toBe(
      promptBlockHashes(tokens, 16, engineChainRoot('b'))[0],
    );
  });
});
