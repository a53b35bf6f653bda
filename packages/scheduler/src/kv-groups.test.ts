import { KvCacheManager } from '@kvasir/kv-allocator';
import { describe, expect, it } from 'vitest';
import { Scheduler } from './scheduler.js';
import { expectError, seqPrompt } from './testing/scheduler-harness.js';
import type { BatchPlan } from './types.js';

// A cache of two KV groups: full attention, and a sliding window of 8 (blocks of 4).
const grouped = (numBlocks = 64) =>
  new KvCacheManager({ numBlocks, blockSize: 4, groups: [{}, { window: 8 }] });

/** Every row's slots in every group land in that row's table of that group. */
function checkGroups(plan: BatchPlan, kv: KvCacheManager): void {
  expect(plan.kvGroups).toHaveLength(1);
  const g = plan.kvGroups![0]!;
  expect(g.slotMapping).toHaveLength(plan.numTokens);
  plan.rows.forEach((row, r) => {
    const table = g.blockTables[r]!;
    expect(Array.from(table)).toEqual(kv.blockTables(row.seqId)[1]);
    for (let i = 0; i < row.queryLen; i++) {
      const pos = plan.positions[row.queryStart + i]!;
      const slot = g.slotMapping[row.queryStart + i]!;
      expect(slot).toBe(table[Math.floor(pos / 4)]! * 4 + (pos % 4));
    }
    // Holes only before the window of the row's first query.
    const first = row.contextLen - row.queryLen;
    const lo = Math.max(0, Math.floor((first + 1 - 8) / 4));
    table.forEach((b, i) => {
      expect(b === -1 ? i < lo : b >= 0).toBe(true);
    });
  });
}

describe('Scheduler over KV cache groups', () => {
  it("plans every group's slots and tables, releases the window's blocks, and leaks nothing", () => {
    const kv = grouped();
    const sched = new Scheduler({ kvCache: kv, maxModelLen: 256, maxNumBatchedTokens: 16 });
    for (let r = 0; r < 3; r++)
      sched.add({ id: `r${r}`, promptTokenIds: seqPrompt(30, 1 + r), maxTokens: 20 });
    let released = 0;
    for (let step = 0; step < 200 && sched.hasUnfinished(); step++) {
      const plan = sched.schedule();
      if (plan.numTokens > 0) checkGroups(plan, kv);
      released = Math.max(released, kv.stats().groups[1]!.releasedBlocks);
      sched.update({
        seqIds: plan.sampleSeqIds,
        tokenIds: Array.from(plan.sampleSeqIds, () => 5),
      });
    }
    expect(sched.hasUnfinished()).toBe(false);
    expect(released).toBeGreaterThan(0);
    expect(kv.stats().usedBlocks).toBe(0);
  });

  it('refuses swap preemption on a grouped cache, naming recompute', () => {
    expectError(
      () => new Scheduler({ kvCache: grouped(), maxModelLen: 64, preemptionMode: 'swap' }),
      'INVALID_CONFIG',
      /'swap' needs a KV cache of one group.*recompute/,
    );
  });
});
