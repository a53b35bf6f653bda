import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { type ForwardPlan, normalizePlan } from './forward-plan.js';

const limits = { vocabSize: 100, numBlocks: 8, blockSize: 4, maxPosition: 64 };

function plan(rows: ForwardPlan['rows'], numTokens: number): ForwardPlan {
  return {
    tokenIds: new Int32Array(numTokens).fill(1),
    positions: Int32Array.from({ length: numTokens }, (_, i) => i),
    slotMapping: new Int32Array(numTokens).fill(-1),
    rows,
    logitsIndices: Int32Array.of(numTokens - 1),
  };
}

describe('normalizePlan', () => {
  it('reads rows and copies (the scheduler BatchPlan names) and nothing else', () => {
    const p = plan([{ queryStart: 0, queryLen: 2, contextLen: 6, blockTable: [3, 5] }], 2);
    const n = normalizePlan({ ...p, copies: [{ src: 1, dst: 2 }] }, limits);
    expect(n.copies).toEqual([{ src: 1, dst: 2 }]);
    expect([...n.blockTables]).toEqual([3, 5]);
    expect(normalizePlan(p, limits).copies).toEqual([]);
    // The old aliases are gone: a plan that only has them has no rows.
    const { rows: _, ...noRows } = p;
    const old = { ...noRows, seqs: p.rows } as unknown as ForwardPlan;
    expect(() => normalizePlan(old, limits)).toThrow(/plan has no rows/);
  });

  it('names the row and block that fall outside the cache', () => {
    const p = plan([{ queryStart: 0, queryLen: 1, contextLen: 5, blockTable: [0, 8] }], 1);
    expect(() => normalizePlan(p, limits)).toThrow(/row 0: block 8 outside the cache/);
    const c = plan([{ queryStart: 0, queryLen: 1, contextLen: 1, blockTable: [0] }], 1);
    expect(() => normalizePlan({ ...c, copies: [{ src: 0, dst: 9 }] }, limits)).toThrow(
      expect.objectContaining({ code: 'INVALID_PLAN' }),
    );
  });

  it('flattens any valid batch into padded per-row arrays', () => {
    const row = fc.record({ queryLen: fc.integer({ min: 1, max: 4 }), past: fc.nat(8) });
    fc.assert(
      fc.property(fc.array(row, { minLength: 1, maxLength: 5 }), (spec) => {
        let start = 0;
        const rows = spec.map(({ queryLen, past }, r) => {
          const contextLen = past + queryLen;
          const blocks = Math.ceil(contextLen / limits.blockSize);
          const out = {
            queryStart: start,
            queryLen,
            contextLen,
            blockTable: Array.from({ length: blocks }, (_, b) => (r + b) % limits.numBlocks),
          };
          start += queryLen;
          return out;
        });
        const n = normalizePlan(plan(rows, start), limits);
        expect(n.numSeqs).toBe(rows.length);
        expect(n.numTokens).toBe(start);
        for (let r = 0; r < rows.length; r++) {
          const want = rows[r]!;
          expect(n.queryStarts[r]).toBe(want.queryStart);
          expect(n.contextLens[r]).toBe(want.contextLen);
          const table = n.blockTables.subarray(r * n.maxBlocksPerSeq, (r + 1) * n.maxBlocksPerSeq);
          expect([...table.subarray(0, want.blockTable.length)]).toEqual(want.blockTable);
          expect(table.subarray(want.blockTable.length).every((b) => b === 0)).toBe(true);
        }
      }),
    );
  });
});
