import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { GenerationRequest } from '@kvasir/server';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseEngineConfig } from '../config.js';
import { greedyRequest } from '../testing/greedy-request.js';
import { type BuiltEngine, buildEngine } from './bootstrap.js';

// An idle engine must sleep: its loop waits for a request, its wasm workers park. Measured in
// CPU time and step counts, never wall time, so a loaded machine cannot fail these tests.
let built: BuiltEngine;

beforeAll(async () => {
  built = await buildEngine(
    parseEngineConfig({
      backend: 'wasm',
      threads: 2,
      cacheDir: mkdtempSync(join(tmpdir(), 'kvasir-idle-')),
      numGpuBlocks: 12,
      blockSize: 8,
      maxNumSeqs: 4,
    }),
  );
});

afterAll(async () => {
  await built.close();
});

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

const greedy = (id: string, prompt: number[], maxTokens: number): GenerationRequest =>
  greedyRequest(id, prompt, maxTokens, built.engine.modelCard.id);

async function tokensOf(id: string, prompt: number[], maxTokens: number) {
  const tokens: number[] = [];
  let finish: string | undefined;
  const signal = new AbortController().signal;
  for await (const event of await built.engine.generate(greedy(id, prompt, maxTokens), signal)) {
    if (event.kind !== 'delta') continue;
    tokens.push(...event.tokenIds);
    finish = event.finishReason ?? finish;
  }
  return { tokens, finish };
}

const cpuMs = (since: NodeJS.CpuUsage) => {
  const u = process.cpuUsage(since);
  return (u.user + u.system) / 1000;
};

describe('KvasirEngine idling', () => {
  it('uses no CPU between requests, and the next request after the idle spell generates the same tokens', async () => {
    const engine = built.engine;
    const prompt = [5, 9, 2, 7, 7, 1];
    const first = await tokensOf('a', prompt, 12);
    expect(first.tokens).toHaveLength(12);
    // Past the background compiles the first request set off (tens of ms of CPU).
    await sleep(1000);
    const steps = engine.steps;
    const cpu = process.cpuUsage();
    await sleep(2000);
    // Under 1 ms here; a worker that wakes every millisecond costs tens, one that spins most of
    // the 2,000.
    expect(cpuMs(cpu)).toBeLessThan(100);
    expect(engine.steps).toBe(steps);
    const second = await tokensOf('b', prompt, 12);
    expect(second.tokens).toEqual(first.tokens);
  });

  it('backs off while nothing can run (blocks held elsewhere) and runs the request once they come back', async () => {
    const engine = built.engine;
    // Every block of the cache, held by a sequence the scheduler does not know (as a KV
    // connector's reserved blocks are): the request below waits, and each step is empty.
    const held = 'held-elsewhere';
    const all = engine.kvCache.numAvailableBlocks() * 8;
    expect(engine.kvCache.allocateSlots(held, new Array(all).fill(1)).ok).toBe(true);
    const done = tokensOf('waits', [3, 1, 4], 4);
    await sleep(100);
    const steps = engine.steps;
    await sleep(1500);
    // Retries back off from 1 ms to 1 s: about 5 steps here, where a 1 ms poll took 1,500.
    expect(engine.steps - steps).toBeLessThan(20);
    expect(engine.steps - steps).toBeGreaterThan(0);
    engine.kvCache.free(held);
    const { tokens, finish } = await done;
    expect(tokens).toHaveLength(4);
    expect(finish).toBe('length');
    expect(engine.stats().blocks.used).toBe(0);
  });
});
