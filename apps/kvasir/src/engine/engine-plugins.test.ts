import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { EngineError, GenerationRequest } from '@kvasir/server';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseEngineConfig } from '../config.js';
import { greedyRequest } from '../testing/greedy-request.js';
import { type BuiltEngine, buildEngine } from './bootstrap.js';

// The real engine (scheduler, allocator, CPU runner, embedded default model) with faults put
// where a misbehaving plug-in would surface: planning a step, and a client's abort.
const cacheDir = mkdtempSync(join(tmpdir(), 'kvasir-engine-plugins-'));
const lines: string[] = [];
let built: BuiltEngine;

beforeAll(async () => {
  built = await buildEngine(
    parseEngineConfig({ backend: 'cpu', cacheDir, numGpuBlocks: 32, blockSize: 8, maxNumSeqs: 4 }),
    { log: (line) => lines.push(line) },
  );
});
afterAll(async () => {
  await built.close();
});

const greedy = (id: string, maxTokens: number): GenerationRequest =>
  greedyRequest(
    id,
    Array.from({ length: 20 }, (_, j) => (j * 11 + id.length) % 250),
    maxTokens,
  );

async function drain(stream: AsyncIterable<{ kind: string }>): Promise<unknown> {
  try {
    for await (const _ of stream) {
      // consume
    }
  } catch (error) {
    return error;
  }
  return undefined;
}

describe('the engine keeps serving through failures a plug-in could cause', () => {
  it('a step whose planning throws ends the requests in flight; the engine goes on', async () => {
    const scheduler = built.engine.scheduler;
    const schedule = scheduler.schedule.bind(scheduler);
    let thrown = 0;
    scheduler.schedule = () => {
      if (thrown === 0 && scheduler.hasUnfinished()) {
        // Let the request run a few steps first, so it holds blocks when planning fails.
        if (built.engine.steps >= 3) {
          thrown++;
          throw new Error('planning bug');
        }
      }
      return schedule();
    };
    try {
      const first = await built.engine.generate(greedy('a', 40), new AbortController().signal);
      const error = await drain(first);
      expect((error as EngineError).code).toBe('INTERNAL');
      expect(thrown).toBe(1);
      expect(built.engine.health().status).toBe('ok');
      expect(built.engine.kvCache.stats().usedBlocks).toBe(0);
      expect(lines.join('\n')).toMatch(
        /planning step \d+ failed \(Error: planning bug\); ending 1/,
      );
      const second = await built.engine.generate(greedy('b', 5), new AbortController().signal);
      expect(await drain(second)).toBeUndefined();
      expect(built.engine.stats().failures).toMatchObject({ steps: 1, requests: 1 });
    } finally {
      scheduler.schedule = schedule;
    }
  });

  it('an abort whose clean-up throws ends the stream with an error, never an uncaught one', async () => {
    const scheduler = built.engine.scheduler;
    const abort = scheduler.abort.bind(scheduler);
    const controller = new AbortController();
    const stream = await built.engine.generate(greedy('c', 200), controller.signal);
    scheduler.abort = () => {
      throw new Error('double free');
    };
    try {
      controller.abort();
    } finally {
      scheduler.abort = abort;
    }
    const error = await drain(stream);
    expect((error as EngineError).code).toBe('INTERNAL');
    expect(lines.join('\n')).toMatch(/aborting request c failed \(Error: double free\)/);
    // The request the scheduler still held runs out; the engine serves the next one.
    scheduler.abort('c');
    const next = await built.engine.generate(greedy('d', 3), new AbortController().signal);
    expect(await drain(next)).toBeUndefined();
    expect(built.engine.health().status).toBe('ok');
  });
});
