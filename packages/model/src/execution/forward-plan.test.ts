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

  it('reads attention mass outputs and key shifts, off by default', () => {
    const p = plan(
      [
        { queryStart: 0, queryLen: 3, contextLen: 9, blockTable: [1, 2, 3] },
        {
          queryStart: 3,
          queryLen: 2,
          contextLen: 6,
          blockTable: [4, 5],
          attentionMass: new Float32Array(2),
        },
        {
          queryStart: 5,
          queryLen: 3,
          contextLen: 3,
          blockTable: [6],
          attentionMass: new Float32Array(4),
          massQueries: 2,
        },
      ],
      8,
    );
    const n = normalizePlan({ ...p, keyShifts: [{ block: 7, delta: -4 }] }, limits);
    expect([...n.massQueries]).toEqual([0, 2, 2]);
    expect(n.massOut[0]).toBeUndefined();
    expect(n.massOut[1]).toBe(p.rows[1]!.attentionMass);
    expect(n.massOut[2]).toBe(p.rows[2]!.attentionMass);
    expect(n.keyShifts).toEqual([{ block: 7, delta: -4 }]);
    const off = normalizePlan(plan([p.rows[0]!], 3), limits);
    expect([...off.massQueries]).toEqual([0]);
    expect(off.keyShifts).toEqual([]);
  });

  it('rejects a mass output too short, a bad massQueries and bad key shifts', () => {
    const row = { queryStart: 0, queryLen: 2, contextLen: 6, blockTable: [3, 5] };
    const bad = (p: ForwardPlan, re: RegExp) => {
      expect(() => normalizePlan(p, limits)).toThrow(re);
      expect(() => normalizePlan(p, limits)).toThrow(
        expect.objectContaining({ code: 'INVALID_PLAN' }),
      );
    };
    bad(
      plan([{ ...row, attentionMass: new Float32Array(1) }], 2),
      /row 0: attentionMass has 1 entries, needs 2/,
    );
    for (const m of [0, 3, 1.5]) {
      bad(
        plan([{ ...row, attentionMass: new Float32Array(2), massQueries: m }], 2),
        new RegExp(`row 0: massQueries ${m} outside \\[1, 2\\]`),
      );
    }
    bad(plan([{ ...row, massQueries: 1 }], 2), /massQueries without attentionMass/);
    bad(
      plan([{ ...row, attentionMass: [0, 0] as unknown as Float32Array }], 2),
      /attentionMass is not a Float32Array/,
    );
    const p = plan([row], 2);
    bad({ ...p, keyShifts: [{ block: 8, delta: 1 }] }, /key shift of block 8 outside the cache/);
    for (const delta of [0, 64, -64, 0.5]) {
      bad({ ...p, keyShifts: [{ block: 1, delta }] }, /delta .* is not a nonzero integer/);
    }
    bad(
      {
        ...p,
        keyShifts: [
          { block: 1, delta: 1 },
          { block: 1, delta: 2 },
        ],
      },
      /key shift of block 1 listed twice/,
    );
  });
});
