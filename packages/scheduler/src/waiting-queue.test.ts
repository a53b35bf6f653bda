import { describe, expect, it } from 'vitest';
import { longestPrefixMatchPolicy, priorityPolicy } from './policies.js';
import { seqPrompt, setup } from './testing/scheduler-harness.js';

describe('queue policies', () => {
  it('priority: lower value first; aging lets an old request overtake', () => {
    let now = 0;
    const { sched } = setup({
      maxNumSeqs: 1,
      queuePolicy: priorityPolicy({ agingRate: 1 }),
      clock: () => now,
    });
    sched.add({ id: 'old-low', promptTokenIds: [1], maxTokens: 1, priority: 10 });
    now = 5;
    sched.add({ id: 'new-high', promptTokenIds: [2], maxTokens: 1, priority: 0 });
    // Waited 5 units: 10 − 5 = 5 > 0, the high-priority one goes first.
    expect(sched.schedule().rows[0]!.requestId).toBe('new-high');
    const { sched: s2 } = setup({
      maxNumSeqs: 1,
      queuePolicy: priorityPolicy({ agingRate: 1 }),
      clock: () => now,
    });
    now = 0;
    s2.add({ id: 'old-low', promptTokenIds: [1], maxTokens: 1, priority: 10 });
    now = 20;
    s2.add({ id: 'new-high', promptTokenIds: [2], maxTokens: 1, priority: 0 });
    // Waited 20: 10 − 20 < 0, aging wins.
    expect(s2.schedule().rows[0]!.requestId).toBe('old-low');
  });

  it('longest prefix match first, with a starvation guard and an FCFS fallback', () => {
    let now = 0;
    const make = (opts = {}) =>
      setup({ maxNumSeqs: 1, queuePolicy: longestPrefixMatchPolicy(opts), clock: () => now });
    const shared = seqPrompt(12);
    const warm = (s: ReturnType<typeof make>) => {
      s.sched.add({ id: 'seed', promptTokenIds: shared, maxTokens: 1 });
      s.runAll();
    };
    const a = make({ maxWait: 100 });
    warm(a);
    a.sched.add({ id: 'cold', promptTokenIds: seqPrompt(12, 60), maxTokens: 1 });
    a.sched.add({ id: 'hot', promptTokenIds: [...shared, 77], maxTokens: 1 });
    expect(a.sched.schedule().rows[0]!.requestId).toBe('hot');

    const b = make({ maxWait: 3 });
    warm(b);
    b.sched.add({ id: 'cold', promptTokenIds: seqPrompt(12, 60), maxTokens: 1 });
    now = 10;
    b.sched.add({ id: 'hot', promptTokenIds: [...shared, 77], maxTokens: 1 });
    expect(b.sched.schedule().rows[0]!.requestId).toBe('cold');

    now = 0;
    const c = make({ fcfsQueueLength: 1 });
    warm(c);
    c.sched.add({ id: 'cold', promptTokenIds: seqPrompt(12, 60), maxTokens: 1 });
    c.sched.add({ id: 'hot', promptTokenIds: [...shared, 77], maxTokens: 1 });
    expect(c.sched.schedule().rows[0]!.requestId).toBe('cold');
  });
});
