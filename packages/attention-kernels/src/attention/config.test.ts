import { seededRandom } from '@kvasir/test-utils';
import { describe, expect, it } from 'vitest';
import { pagedDecodeAttentionCpu } from '../decode/paged-decode-reference.js';
import { AttentionKernelError } from '../errors.js';
import { f32Format } from '../kv-format/float.js';
import { pagedPrefillAttentionCpu } from '../prefill/paged-prefill-reference.js';
import { pagedFixture } from '../testing/paged-fixtures.js';

describe('the CPU references check their input (validateConfig, validateSequences)', () => {
  const config = { numQHeads: 4, numKvHeads: 2, headDim: 64, blockSize: 8, format: f32Format };
  const fx = pagedFixture(seededRandom(1), { ...config, contextLens: [10, 20] });
  const base = {
    query: new Float32Array(2 * 4 * 64),
    kvCache: fx.cache,
    blockTables: fx.blockTables,
    contextLens: fx.contextLens,
    numSeqs: 2,
    maxBlocksPerSeq: fx.maxBlocksPerSeq,
  };
  const code = (f: () => unknown): string | undefined => {
    try {
      f();
    } catch (e) {
      if (AttentionKernelError.isInstance(e)) return e.code;
      throw e;
    }
    return undefined;
  };

  it('accepts the valid batch', () => {
    expect(code(() => pagedDecodeAttentionCpu(config, base))).toBeUndefined();
  });
  it('rejects a query of the wrong length', () => {
    expect(
      code(() => pagedDecodeAttentionCpu(config, { ...base, query: new Float32Array(5) })),
    ).toBe('SHAPE_MISMATCH');
  });
  it('rejects block tables of the wrong length', () => {
    expect(
      code(() => pagedDecodeAttentionCpu(config, { ...base, blockTables: new Uint32Array(1) })),
    ).toBe('SHAPE_MISMATCH');
  });
  it('rejects a block id outside the cache', () => {
    const blockTables = fx.blockTables.slice();
    blockTables[0] = fx.numBlocks;
    expect(code(() => pagedDecodeAttentionCpu(config, { ...base, blockTables }))).toBe(
      'BLOCK_OUT_OF_RANGE',
    );
  });
  it('rejects a context longer than its block table', () => {
    const contextLens = Uint32Array.of(10, fx.maxBlocksPerSeq * 8 + 1);
    expect(code(() => pagedDecodeAttentionCpu(config, { ...base, contextLens }))).toBe(
      'CONTEXT_TOO_LONG',
    );
  });
  it('rejects a head dim with no kernel', () => {
    expect(code(() => pagedDecodeAttentionCpu({ ...config, headDim: 72 }, base))).toBe(
      'UNSUPPORTED_HEAD_DIM',
    );
  });
  it('rejects query heads that are not a multiple of KV heads', () => {
    expect(code(() => pagedDecodeAttentionCpu({ ...config, numQHeads: 3 }, base))).toBe(
      'INVALID_ARGUMENT',
    );
  });
  it('rejects a prefill query longer than its context', () => {
    expect(
      code(() =>
        pagedPrefillAttentionCpu(config, {
          ...base,
          query: new Float32Array(30 * 4 * 64),
          queryStarts: Uint32Array.of(0, 11),
          queryLens: Uint32Array.of(11, 19),
        }),
      ),
    ).toBe('INVALID_ARGUMENT');
  });
});
