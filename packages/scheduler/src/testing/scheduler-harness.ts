// A scheduler over a small cache, driven step by step by the fake executor: the setup every
// scheduler test file shares.
import { KvCacheManager } from '@kvasir/kv-allocator';
import { expect } from 'vitest';
import { SchedulerError } from '../errors.js';
import { Scheduler } from '../scheduler.js';
import type { SchedulerOptions } from '../scheduler-options.js';
import type { BatchPlan, RequestOutput, SchedulerEvent } from '../types.js';
import { FakeExecutor } from './fake-executor.js';

/** Vocabulary and seed of the fake executor's tokens (`referenceOutput` takes the same). */
export const VOCAB = 50;
export const SEED = 99;

/**
 * A scheduler (maxModelLen 256) over a `numBlocks` × `blockSize` cache (64 × 4), recording
 * every event and every request's output. `step()` schedules, runs and updates once;
 * `runAll()` steps until nothing is left and fails if that takes over `limit` steps.
 */
export function setup(
  opts: Partial<SchedulerOptions> & { numBlocks?: number; blockSize?: number } = {},
) {
  const { numBlocks = 64, blockSize = 4, ...rest } = opts;
  const kv = new KvCacheManager({ numBlocks, blockSize });
  const events: SchedulerEvent[] = [];
  const sched = new Scheduler({
    kvCache: kv,
    maxModelLen: 256,
    onEvent: (e) => events.push(e),
    ...rest,
  });
  const exec = new FakeExecutor(blockSize, SEED, VOCAB);
  const outputs = new Map<string, RequestOutput>();
  const step = (): BatchPlan => {
    const plan = sched.schedule();
    for (const o of sched.update(exec.run(plan))) outputs.set(o.requestId, o);
    return plan;
  };
  const runAll = (limit = 1000) => {
    for (let i = 0; i < limit && sched.hasUnfinished(); i++) step();
    expect(sched.hasUnfinished()).toBe(false);
  };
  return { kv, sched, exec, outputs, step, runAll, events };
}

/** `len` consecutive token ids from `start`. */
export const seqPrompt = (len: number, start = 1) =>
  Array.from({ length: len }, (_, i) => start + i);

/** Fails unless `fn` throws a SchedulerError with `code` (and a message matching `match`). */
export function expectError(fn: () => unknown, code: string, match?: RegExp): void {
  try {
    fn();
  } catch (e) {
    expect(SchedulerError.isInstance(e)).toBe(true);
    expect((e as SchedulerError).code).toBe(code);
    if (match) expect((e as Error).message).toMatch(match);
    return;
  }
  throw new Error('expected a SchedulerError');
}
