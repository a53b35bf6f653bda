import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { KvasirEngine } from '@kvasir/engine';
import {
  defineKvConnector,
  type KvConnectorContext,
  type KvConnectorStep,
} from '@kvasir/offload/connectors';
import type { GenerationRequest } from '@kvasir/server/spec';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseEngineConfig } from '../config.js';
import { type BuiltEngine, buildEngine } from '../engine/bootstrap.js';

// A user's connector through the engine's `connectors` option, on the real engine and runner
// (the seeded random-weight model on the wasm backend).
let built: BuiltEngine;
beforeAll(async () => {
  built = await buildEngine(
    parseEngineConfig({
      model: 'random',
      backend: 'wasm',
      cacheDir: mkdtempSync(join(tmpdir(), 'kvasir-connectors-')),
      numGpuBlocks: 16,
      blockSize: 8,
    }),
  );
});
afterAll(async () => {
  await built?.close();
});

function request(id: string, prompt: number[]): GenerationRequest {
  return {
    id,
    model: built.engine.modelCard.id,
    promptTokens: prompt,
    n: 1,
    maxTokens: 5,
    sampling: {
      temperature: 0,
      topP: 1,
      topK: 0,
      minP: 0,
      presencePenalty: 0,
      frequencyPenalty: 0,
      repetitionPenalty: 1,
      seed: 1,
    },
    stopTokenIds: [],
    ignoreEos: true,
  };
}

async function tokensOf(engine: KvasirEngine, id: string, prompt: number[]): Promise<number[]> {
  const out: number[] = [];
  const stream = await engine.generate(request(id, prompt), new AbortController().signal);
  for await (const event of stream) if (event.kind === 'delta') out.push(...event.tokenIds);
  return out;
}

describe('KvasirEngine connectors option', () => {
  it('calls a user connector at admission, around every step and at stop, changing no output', async () => {
    const admitted: { requestId: string; promptTokens: readonly number[] }[] = [];
    const steps: KvConnectorStep[] = [];
    let context: KvConnectorContext | undefined;
    let closed = 0;
    const engine = new KvasirEngine({
      runner: built.engine.runner,
      config: built.engine.config,
      connectors: [
        (ctx) => {
          context = ctx;
          return defineKvConnector({
            name: 'observer',
            onAdmit: async (r) => {
              admitted.push(r);
              return 0;
            },
            beforeForward: async () => undefined,
            afterForward: (step) => {
              steps.push(step);
            },
            close: async () => {
              closed++;
            },
          });
        },
      ],
    });
    const prompt = Array.from({ length: 20 }, (_, i) => (i * 37) % 200);
    const got = await tokensOf(engine, 'with', prompt);
    await engine.stop();
    const want = await tokensOf(built.engine, 'without', prompt);
    expect(got).toEqual(want);
    expect(admitted).toEqual([{ requestId: 'with', promptTokens: prompt }]);
    expect(context?.kvCache).toBe(engine.kvCache);
    expect(context?.device.blockBytes).toBe(built.engine.runner.facts.blockBytes);
    // The prompt in one step, then one step per token after the first.
    expect(steps.length).toBe(5);
    expect(steps.every((s) => s.rows[0]?.requestId === 'with')).toBe(true);
    expect(closed).toBe(1);
  });

  it('refuses a factory that returns no valid connector, before any request', () => {
    const make = (value: unknown) => () =>
      new KvasirEngine({
        runner: built.engine.runner,
        config: built.engine.config,
        connectors: [() => value as never],
      });
    expect(make({ name: 'old', close: async () => {} })).toThrow(
      expect.objectContaining({
        code: 'INVALID_CONNECTOR',
        message: expect.stringMatching(/defineKvConnector/),
      }),
    );
    expect(make(undefined)).toThrow(expect.objectContaining({ code: 'INVALID_CONNECTOR' }));
  });

  it("a connector's failures are misses, counted, never a failed request or a stopped engine", async () => {
    const lines: string[] = [];
    let admits = 0;
    const engine = new KvasirEngine({
      runner: built.engine.runner,
      config: built.engine.config,
      log: (line) => lines.push(line),
      connectors: [
        () =>
          defineKvConnector({
            name: 'flaky',
            // Throws, rejects, then resolves to what is not a token count, in turn.
            onAdmit: (() => {
              admits++;
              if (admits % 3 === 1) throw new Error('store is down');
              if (admits % 3 === 2) return Promise.reject(new Error('timed out'));
              return Promise.resolve(-4);
            }) as never,
            afterForward: () => {
              throw new Error('cannot write');
            },
            close: async () => {},
          }),
      ],
    });
    const prompt = Array.from({ length: 20 }, (_, i) => (i * 41) % 200);
    const want = await tokensOf(built.engine, 'reference', prompt);
    for (let i = 0; i < 3; i++) expect(await tokensOf(engine, `r${i}`, prompt)).toEqual(want);
    await engine.stop();
    // 3 admissions, and afterForward once per step (5 steps a request).
    expect(engine.pluginFailures()).toEqual({ 'kv-connector:flaky': 3 + 15 });
    expect(lines.filter((l) => l.includes('plug-in kv-connector:flaky failed'))).toHaveLength(1);
    expect(engine.stats().failures?.requests).toBe(0);
  });
});
