import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { GpuError } from '@kvasir/gpu';
import type { BatchPlan } from '@kvasir/scheduler';
import { EngineError, type GenerationRequest } from '@kvasir/server';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseEngineConfig } from '../config.js';
import { greedyRequest } from '../testing/greedy-request.js';
import { type BuiltEngine, buildEngine } from './bootstrap.js';

// The real engine (scheduler, allocator, CPU runner, embedded default model) with a fault
// injected into the model runner for one step.
const cacheDir = mkdtempSync(join(tmpdir(), 'kvasir-faults-'));
const lines: string[] = [];

function engineFor(): Promise<BuiltEngine> {
  return buildEngine(
    parseEngineConfig({
      backend: 'cpu',
      cacheDir,
      numGpuBlocks: 32,
      blockSize: 8,
      maxNumSeqs: 4,
      maxNumBatchedTokens: 256,
      // No offload tier: a prefix hit below can only come from the GPU cache.
      offloadPrefix: false,
    }),
    { log: (line) => lines.push(line) },
  );
}

const greedy = (id: string, prompt: readonly number[], maxTokens: number): GenerationRequest =>
  greedyRequest(id, prompt, maxTokens);

interface Outcome {
  readonly tokens: number[];
  readonly cached: number;
  readonly error?: unknown;
}

async function run(built: BuiltEngine, request: GenerationRequest): Promise<Outcome> {
  const stream = await built.engine.generate(request, new AbortController().signal);
  const tokens: number[] = [];
  let cached = -1;
  try {
    for await (const event of stream) {
      if (event.kind === 'delta') tokens.push(...event.tokenIds);
      else if (event.kind === 'usage') cached = event.cachedPromptTokens;
    }
  } catch (error) {
    return { tokens, cached, error };
  }
  return { tokens, cached };
}

/** Makes the runner's forward pass throw `error` once, for the first plan `pick` selects. */
function injectForwardFault(built: BuiltEngine, pick: (plan: BatchPlan) => boolean, error: Error) {
  const runner = built.engine.runner;
  const forward = runner.forward.bind(runner);
  let fired = 0;
  runner.forward = async (plan) => {
    if (fired === 0 && pick(plan)) {
      fired++;
      throw error;
    }
    return forward(plan);
  };
  return () => fired;
}

const prompt = (seed: number, len: number) =>
  Array.from({ length: len }, (_, j) => (seed * 37 + j * 11) % 250);

describe('KvasirEngine isolates a failed step', () => {
  let built: BuiltEngine;
  beforeAll(async () => {
    built = await engineFor();
  });
  afterAll(async () => {
    await built?.close();
  });

  it('fails only the requests of that step, frees their blocks, and keeps serving', async () => {
    const engine = built.engine;
    const victimPrompt = prompt(1, 20);
    // References, computed before any fault, on a cache that is then emptied of them.
    const reference = await run(built, greedy('ref', victimPrompt, 6));
    expect(reference.error).toBeUndefined();
    engine.kvCache.resetPrefixCache();

    // A long decode runs first; the victim's prefill step then fails.
    const bystander = run(built, greedy('bystander', prompt(2, 12), 24));
    while (engine.steps < 3) await new Promise((r) => setTimeout(r, 1));
    const fired = injectForwardFault(
      built,
      (plan) => plan.rows.some((r) => r.requestId === 'victim'),
      new Error('injected fault'),
    );
    const victim = await run(built, greedy('victim', victimPrompt, 6));
    expect(fired()).toBe(1);
    expect(EngineError.isInstance(victim.error)).toBe(true);
    expect((victim.error as EngineError).code).toBe('INTERNAL');
    expect(lines.some((l) => /step \d+ failed \(Error: injected fault\)/.test(l))).toBe(true);

    // The bystander either shared the failed step (and ended with the same clean error) or
    // finished all its tokens; either way the engine is healthy and serving.
    const b = await bystander;
    if (b.error === undefined) expect(b.tokens).toHaveLength(24);
    else expect((b.error as EngineError).code).toBe('INTERNAL');
    expect(engine.health()).toEqual({ status: 'ok' });

    // The failed step's blocks were never written: the same prompt must compute afresh (no
    // prefix hit on them) and give the reference tokens.
    const again = await run(built, greedy('again', victimPrompt, 6));
    expect(again.error).toBeUndefined();
    expect(again.cached).toBe(0);
    expect(again.tokens).toEqual(reference.tokens);
    const stats = engine.stats();
    expect(stats.blocks.used).toBe(0);
    expect(stats.blocks.used + stats.blocks.cached + stats.blocks.free).toBe(stats.blocks.total);
    expect(stats.failures?.steps).toBe(1);
    expect(stats.failures?.requests).toBeGreaterThanOrEqual(1);
  });

  it('refuses prompt token ids outside the vocabulary at admission', async () => {
    const engine = built.engine;
    await expect(
      engine.generate(greedy('bad', [999_999_999, 5], 4), new AbortController().signal),
    ).rejects.toMatchObject({ code: 'INVALID_REQUEST', details: { param: 'prompt' } });
    expect(engine.health().status).toBe('ok');
    expect((await run(built, greedy('fine', [1, 2, 3], 2))).tokens).toHaveLength(2);
  });
});

describe('KvasirEngine after a lost device', () => {
  it('fails in-flight requests, reports it on health, and refuses new ones', async () => {
    const built = await engineFor();
    try {
      injectForwardFault(
        built,
        () => true,
        new GpuError('DEVICE_LOST', 'The WebGPU device was lost (unknown: injected).'),
      );
      const r = await run(built, greedy('lost', [1, 2, 3], 4));
      expect(r.error).toBeDefined();
      const health = built.engine.health();
      expect(health.status).toBe('draining');
      expect(health.detail).toMatch(/device was lost/);
      await expect(
        built.engine.generate(greedy('after', [1, 2], 2), new AbortController().signal),
      ).rejects.toMatchObject({ code: 'DRAINING' });
    } finally {
      await built.close();
    }
  });
});

describe('KvasirEngine refuses a prompt no compression policy can hold', () => {
  it('a SnapKV prompt past the context is PROMPT_TOO_LONG naming prompt, not the scheduler field', async () => {
    const own = await buildEngine(
      parseEngineConfig({
        backend: 'cpu',
        cacheDir,
        numGpuBlocks: 32,
        blockSize: 8,
        maxModelLen: 64,
      }),
    );
    try {
      const error = await own.engine
        .generate(
          { ...greedy('snap', prompt(3, 100), 4), kvCompression: { policy: 'snapkv', budget: 32 } },
          new AbortController().signal,
        )
        .catch((e: unknown) => e as EngineError);
      expect(error).toMatchObject({ code: 'PROMPT_TOO_LONG', details: { param: 'prompt' } });
      expect((error as Error).message).not.toMatch(/promptTokenIds/);
      // Admission refuses it (the compressed-request bounds) before the scheduler sees it.
      expect((error as Error).message).toMatch(/^prompt: 100 tokens, over the context of 64/);
      expect(own.engine.health().status).toBe('ok');
    } finally {
      await own.close();
    }
  });
});
