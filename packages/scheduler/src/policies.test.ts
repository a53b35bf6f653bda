import { describe, expect, it } from 'vitest';
import { SchedulerError } from './errors.js';
import { HostSlotPool } from './host-slots.js';
import {
  fcfsPolicy,
  longestPrefixMatchPolicy,
  lowestPriorityLatestArrival,
  priorityPolicy,
  type QueueContext,
  type QueuedRequest,
  type RunningRequest,
} from './policies.js';

const req = (over: Partial<QueuedRequest>): QueuedRequest => ({
  requestId: 'r',
  priority: 0,
  arrivalTime: 0,
  arrivalIndex: 0,
  numPromptTokens: 10,
  numPreemptions: 0,
  ...over,
});
const ctx = (over: Partial<QueueContext> = {}): QueueContext => ({
  now: 0,
  queueLength: 2,
  cachedPrefixTokens: () => 0,
  ...over,
});

describe('queue policies', () => {
  it('fcfs ranks by arrival time', () => {
    const p = fcfsPolicy();
    expect(p.rank(req({ arrivalTime: 1 }), ctx())).toBeLessThan(
      p.rank(req({ arrivalTime: 2 }), ctx()),
    );
  });

  it('priority ages waiting requests linearly and refuses a bad rate', () => {
    const p = priorityPolicy({ agingRate: 0.5 });
    expect(p.rank(req({ priority: 4, arrivalTime: 0 }), ctx({ now: 6 }))).toBe(1);
    expect(priorityPolicy({ agingRate: 0 }).rank(req({ priority: 4 }), ctx({ now: 100 }))).toBe(4);
    expect(() => priorityPolicy({ agingRate: -1 })).toThrow(SchedulerError);
  });

  it('lpm prefers cached tokens, hashes only when it must, and guards starvation', () => {
    let lookups = 0;
    const c = (now: number, queueLength: number, cached: number) =>
      ctx({
        now,
        queueLength,
        cachedPrefixTokens: () => {
          lookups++;
          return cached;
        },
      });
    const p = longestPrefixMatchPolicy({ maxWait: 10, fcfsQueueLength: 4 });
    expect(p.rank(req({}), c(0, 2, 64))).toBeLessThan(p.rank(req({}), c(0, 2, 16)));
    // Starved: ahead of any cache hit, oldest first.
    const starvedOld = p.rank(req({ arrivalTime: 0 }), c(20, 2, 0));
    const starvedNew = p.rank(req({ arrivalTime: 5 }), c(20, 2, 0));
    expect(starvedOld).toBeLessThan(starvedNew);
    expect(starvedNew).toBeLessThan(p.rank(req({ arrivalTime: 15 }), c(20, 2, 10_000)));
    const before = lookups;
    expect(p.rank(req({ arrivalTime: 3 }), c(0, 5, 64))).toBe(3); // long queue: FCFS, no hashing
    expect(lookups).toBe(before);
  });
});

describe('preemption policy', () => {
  const run = (over: Partial<RunningRequest>): RunningRequest => ({
    requestId: 'r',
    priority: 0,
    arrivalTime: 0,
    arrivalIndex: 0,
    numComputedTokens: 0,
    numSeqs: 1,
    numPreemptions: 0,
    ...over,
  });
  it('picks the lowest priority, then the latest arrival', () => {
    const p = lowestPriorityLatestArrival();
    const ids = (list: RunningRequest[]) => list.map((r, i) => ({ ...r, requestId: `r${i}` }));
    expect(
      p.chooseVictim(
        ids([run({ priority: 1 }), run({ priority: 3 }), run({ priority: 2, arrivalTime: 9 })]),
      ),
    ).toBe('r1');
    expect(
      p.chooseVictim(
        ids([run({ arrivalTime: 1 }), run({ arrivalTime: 5 }), run({ arrivalTime: 3 })]),
      ),
    ).toBe('r1');
    expect(p.chooseVictim(ids([run({ arrivalIndex: 1 }), run({ arrivalIndex: 2 })]))).toBe('r1');
  });
});

describe('HostSlotPool', () => {
  it('hands out each slot once, low first, and takes them back', () => {
    const pool = new HostSlotPool(3);
    expect([pool.allocate(), pool.allocate(), pool.allocate()]).toEqual([0, 1, 2]);
    expect(pool.allocate()).toBe(-1);
    expect(pool.numUsed).toBe(3);
    pool.release(1);
    expect(pool.numFree).toBe(1);
    expect(pool.allocate()).toBe(1);
    expect(() => new HostSlotPool(-1)).toThrow(SchedulerError);
  });
});
