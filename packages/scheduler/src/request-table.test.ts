import { KvCacheManager } from '@kvasir/kv-allocator';
import { describe, expect, it } from 'vitest';
import { HostSlotPool } from './host-slots.js';
import { SequenceGroup } from './request-state.js';
import { RequestTable } from './request-table.js';
import { referenceOutput } from './testing/fake-executor.js';
import { SEED, seqPrompt, setup, VOCAB } from './testing/scheduler-harness.js';
import type { SchedulerEvent, SchedulerRequest } from './types.js';

describe('parallel sampling (fork)', () => {
  it('n > 1 forks the prompt blocks once and samples every child from the same logits row', () => {
    const { sched, kv, outputs, runAll, step } = setup({ eosTokenId: 0 });
    const prompt = seqPrompt(10);
    sched.add({ id: 'p', promptTokenIds: prompt, maxTokens: 6, n: 3 });
    const plan = step();
    expect(plan.rows.length).toBe(1);
    expect(Array.from(plan.logitsIndices)).toEqual([9, 9, 9]);
    expect(new Set(plan.sampleSeqIds).size).toBe(3);
    // Shared: 3 blocks for 10 tokens, not 9.
    expect(kv.stats().usedBlocks).toBe(3);
    const next = step();
    expect(next.rows.length).toBe(3);
    // Two children copy the shared partial block before writing into it.
    expect(next.copies.length).toBe(2);
    runAll();
    const out = outputs.get('p')!;
    expect(out.outputs.map((o) => o.index)).toEqual([0, 1, 2]);
    for (const o of out.outputs) {
      const ref = referenceOutput(SEED, VOCAB, prompt, o.index, 6, (t) => t === 0, 256);
      expect(Array.from(o.tokenIds)).toEqual(ref);
    }
    expect(kv.stats().usedBlocks).toBe(0);
  });
});

describe('RequestTable', () => {
  const make = () => {
    const kv = new KvCacheManager({ numBlocks: 8, blockSize: 4 });
    const hostSlots = new HostSlotPool(4);
    const events: SchedulerEvent[] = [];
    const table = new RequestTable(
      kv,
      hostSlots,
      64,
      () => 7,
      (e) => events.push(e),
    );
    const req: SchedulerRequest = { id: 'r', promptTokenIds: seqPrompt(6), maxTokens: 4 };
    const g = new SequenceGroup(req, 0, 0, 0, 6, undefined, 1);
    table.add(g, req);
    const parent = g.seqs[0]!;
    expect(kv.allocateSlots(parent.id, parent.tokens.subarray(0, 6)).ok).toBe(true);
    parent.allocated = true;
    parent.numComputed = 6;
    return { kv, hostSlots, events, table, g, parent };
  };

  it('forks a sequence into a child with its own id, index and tokens, sharing its blocks', () => {
    const { kv, table, g, parent } = make();
    const child = table.fork(parent);
    expect(child.id).not.toBe(parent.id);
    expect(child.index).toBe(1);
    expect(g.seqs).toEqual([parent, child]);
    expect(table.seq(child.id)).toBe(child);
    expect(child).toMatchObject({ allocated: true, numComputed: 6, numTokens: 6 });
    expect([...kv.blockTable(child.id)]).toEqual([...kv.blockTable(parent.id)]);
    expect(kv.stats().usedBlocks).toBe(2);
    // Tokens are copied: the child's next token is not the parent's.
    child.append(9, 64);
    expect(parent.numTokens).toBe(6);
    expect(table.fork(parent).index).toBe(2);
  });

  it('ends a request once: every block and host slot back, its output returned or queued', () => {
    const { kv, hostSlots, events, table, g, parent } = make();
    const child = table.fork(parent);
    g.hostSlotList.push(hostSlots.allocate());
    const out = table.finish(g, 'abort', undefined, false);
    expect(kv.stats().usedBlocks).toBe(0);
    expect(hostSlots.numUsed).toBe(0);
    expect(table.size).toBe(0);
    expect(table.seq(child.id)).toBeUndefined();
    expect(out).toMatchObject({ requestId: 'r', finishReason: 'abort', finishTime: 7 });
    expect(out.outputs.map((o) => [o.index, o.finishReason])).toEqual([
      [0, 'abort'],
      [1, 'abort'],
    ]);
    expect(table.numAborted).toBe(1);
    // An abort's output goes to its caller, not to the next update().
    expect(table.takeFinished()).toEqual([]);
    expect(events).toEqual([{ type: 'finish', output: out }]);
  });

  it('ends a group with its last sequence, and drops a pruned one without an output', () => {
    const { kv, table, g, parent } = make();
    const child = table.fork(parent);
    const pruned = table.fork(parent);
    table.drop(pruned);
    expect(g.seqs).toEqual([parent, child]);
    table.finishSeq(parent, 'stop');
    expect(table.size).toBe(1);
    table.finishSeq(child, 'length');
    expect(table.size).toBe(0);
    expect(kv.stats().usedBlocks).toBe(0);
    const [out] = table.takeFinished();
    expect(out!.finishReason).toBe('stop');
    expect(out!.outputs.map((o) => o.finishReason)).toEqual(['stop', 'length']);
    expect(table.numFinished).toBe(1);
  });
});
