import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { makeModelConfig, writeRandomCheckpoint } from '@kvasir/model';
import type { GenerationRequest, TokenLogprob } from '@kvasir/server/spec';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseEngineConfig } from '../config.js';
import { type BuiltEngine, buildEngine } from './bootstrap.js';

// The real engine (scheduler, allocator, wasm runner, embedded default model) in-process, with a
// cache small enough that random traffic forces preemption.
let built: BuiltEngine;
const cacheDir = mkdtempSync(join(tmpdir(), 'kvasir-engine-'));

/**
 * The engine on the wasm backend (the default without a GPU; the plain TypeScript backend took
 * most of this file's time) on a 12-block cache of 8-token blocks with an 8 MiB host tier.
 */
function tinyEngine(extra: { preemptionMode?: 'swap' } = {}): Promise<BuiltEngine> {
  return buildEngine(
    parseEngineConfig({
      backend: 'wasm',
      cacheDir,
      numGpuBlocks: 12,
      blockSize: 8,
      maxNumSeqs: 4,
      maxNumBatchedTokens: 64,
      offload: { hostBytes: 8 * 1024 * 1024 },
      ...extra,
    }),
  );
}

beforeAll(async () => {
  built = await tinyEngine({ preemptionMode: 'swap' });
});

afterAll(async () => {
  await built.close();
});

function request(
  id: string,
  prompt: number[],
  maxTokens: number,
  n: number,
  seed: number,
): GenerationRequest {
  return {
    id,
    model: built.engine.modelCard.id,
    promptTokens: prompt,
    n,
    maxTokens,
    sampling: {
      temperature: 1,
      topP: 1,
      topK: 0,
      minP: 0,
      presencePenalty: 0,
      frequencyPenalty: 0,
      repetitionPenalty: 1,
      seed,
    },
    stopTokenIds: [],
    ignoreEos: true,
  };
}

describe('KvasirEngine under random traffic', () => {
  it('ends every request exactly once and returns every block, with aborts at any moment', async () => {
    let next = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.array(
          fc.record({
            promptLen: fc.integer({ min: 1, max: 40 }),
            maxTokens: fc.integer({ min: 1, max: 24 }),
            n: fc.integer({ min: 1, max: 2 }),
            abortAfter: fc.option(fc.integer({ min: 0, max: 20 }), { nil: undefined }),
          }),
          { minLength: 1, maxLength: 6 },
        ),
        async (specs) => {
          const engine = built.engine;
          expect(engine.health().status).toBe('ok');
          const runs = specs.map(async (spec, i) => {
            const controller = new AbortController();
            const prompt = Array.from({ length: spec.promptLen }, (_, j) => (i * 31 + j * 7) % 250);
            const id = `p${next++}`;
            const stream = await engine.generate(
              request(id, prompt, spec.maxTokens, spec.n, i),
              controller.signal,
            );
            if (spec.abortAfter === 0) controller.abort();
            const finished = new Map<number, number>();
            const tokens = new Array<number>(spec.n).fill(0);
            let usage = 0;
            let seen = 0;
            for await (const event of stream) {
              if (event.kind === 'usage') {
                usage++;
                continue;
              }
              if (event.kind !== 'delta') continue;
              tokens[event.index]! += event.tokenIds.length;
              if (event.finishReason)
                finished.set(event.index, (finished.get(event.index) ?? 0) + 1);
              seen += event.tokenIds.length;
              if (spec.abortAfter !== undefined && seen >= spec.abortAfter) controller.abort();
            }
            // Every choice ended exactly once, with at most maxTokens tokens; one usage event.
            expect([...finished.values()]).toEqual(new Array(spec.n).fill(1));
            expect(usage).toBe(1);
            for (const t of tokens) expect(t).toBeLessThanOrEqual(spec.maxTokens);
            if (spec.abortAfter === undefined)
              for (const t of tokens) expect(t).toBe(spec.maxTokens);
          });
          await Promise.all(runs);
          const stats = engine.stats();
          expect(stats.blocks.used).toBe(0);
          expect(stats.requests.running + stats.requests.waiting + stats.requests.preempted).toBe(
            0,
          );
          expect(stats.blocks.used + stats.blocks.cached + stats.blocks.free).toBe(
            stats.blocks.total,
          );
        },
      ),
      { numRuns: 30 },
    );
  });
});

describe('KvasirEngine with prefix offload under random traffic', () => {
  // Recompute preemption and a 12-block GPU cache: shared prefixes are evicted from the GPU
  // constantly and come back from the host tier.
  let offloading: BuiltEngine;
  beforeAll(async () => {
    offloading = await tinyEngine();
  });
  afterAll(async () => {
    await offloading?.close();
  });

  it('imports evicted prefixes without changing any output or leaking a block', async () => {
    const engine = offloading.engine;
    const bases = [24, 32, 40].map((len, b) =>
      Array.from({ length: len }, (_, j) => (b * 53 + j * 11) % 250),
    );
    // (prompt, seed) → the tokens of the first single-choice run that saw it.
    const seen = new Map<string, number[]>();
    let next = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.array(
          fc.record({
            base: fc.integer({ min: 0, max: 2 }),
            suffix: fc.integer({ min: 0, max: 3 }),
            seed: fc.integer({ min: 0, max: 1 }),
            n: fc.integer({ min: 1, max: 2 }),
          }),
          { minLength: 1, maxLength: 5 },
        ),
        async (specs) => {
          const runs = specs.map(async (spec) => {
            const prompt = [
              ...bases[spec.base]!,
              ...Array.from({ length: spec.suffix }, (_, j) => 3 + j),
            ];
            const stream = await engine.generate(
              {
                ...request(`o${next++}`, prompt, 8, spec.n, spec.seed),
                model: engine.modelCard.id,
              },
              new AbortController().signal,
            );
            const tokens = Array.from({ length: spec.n }, () => [] as number[]);
            for await (const event of stream) {
              if (event.kind === 'delta') tokens[event.index]!.push(...event.tokenIds);
            }
            for (const t of tokens) expect(t).toHaveLength(8);
            // The choices of an n = 2 request share one request seed, so only single-choice runs
            // are compared token for token across runs.
            if (spec.n !== 1) return;
            const key = `${spec.base}/${spec.suffix}/${spec.seed}`;
            const before = seen.get(key);
            if (before) expect(tokens[0]).toEqual(before);
            else seen.set(key, tokens[0]!);
          });
          await Promise.all(runs);
          const stats = engine.stats();
          expect(stats.blocks.used).toBe(0);
          expect([...engine.kvCache.sequences()]).toEqual([]);
          expect(stats.blocks.used + stats.blocks.cached + stats.blocks.free).toBe(
            stats.blocks.total,
          );
        },
      ),
      { numRuns: 25 },
    );
    const prefix = engine.prefixOffloadStats();
    expect(prefix.storedBlocks).toBeGreaterThan(0);
    expect(prefix.importedBlocks).toBeGreaterThan(0);
    expect(prefix.importedTokens).toBe(prefix.importedBlocks * 8);
    expect(prefix.errors).toBe(0);
  });
});

describe('echo with logprobs under contention', () => {
  it('prompt log-probabilities do not depend on batching, prefill chunks or preemption', async () => {
    // A small random model of its own, on a 96-token cache with recompute preemption: echo
    // prompts lose their blocks mid-prefill.
    const model = join(cacheDir, 'echo-model');
    await writeRandomCheckpoint(
      model,
      makeModelConfig({
        architecture: 'llama',
        hiddenSize: 64,
        intermediateSize: 128,
        numLayers: 2,
        numHeads: 2,
        numKvHeads: 1,
        vocabSize: 320,
        maxPositionEmbeddings: 256,
        tieWordEmbeddings: false,
      }),
      3,
    );
    const own = await buildEngine(
      parseEngineConfig({
        backend: 'cpu',
        model,
        numGpuBlocks: 12,
        blockSize: 8,
        maxNumSeqs: 4,
        maxNumBatchedTokens: 64,
      }),
    );
    try {
      const engine = own.engine;
      const prompts = [40, 30, 50].map((len, k) =>
        Array.from({ length: len }, (_, j) => (k * 17 + j * 11) % 250),
      );
      let next = 0;
      const score = async (prompt: number[]) => {
        const stream = await engine.generate(
          { ...request(`e${next++}`, prompt, 1, 1, 0), echo: true, logprobs: 0 },
          new AbortController().signal,
        );
        let scores: (number | null)[] | undefined;
        for await (const event of stream) {
          if (event.kind === 'prompt') scores = event.logprobs!.map((lp) => lp.logprob);
        }
        return scores!;
      };
      const alone: (number | null)[][] = [];
      for (const prompt of prompts) alone.push(await score(prompt));
      for (const [k, s] of alone.entries()) {
        expect(s).toHaveLength(prompts[k]!.length);
        expect(s[0]).toBeNull();
        for (const x of s.slice(1)) expect(x).toBeLessThan(0);
      }
      type Spec = { echo: number } | { plain: number };
      const run = async (specs: Spec[]) => {
        await Promise.all(
          specs.map(async (spec) => {
            if ('echo' in spec) {
              const got = await score(prompts[spec.echo]!);
              got.forEach((x, i) => {
                const want = alone[spec.echo]![i]!;
                if (want === null) expect(x).toBeNull();
                else expect(Math.abs(x! - want)).toBeLessThan(1e-5);
              });
              return;
            }
            const prompt = Array.from({ length: spec.plain }, (_, j) => (j * 13) % 250);
            const stream = await engine.generate(
              request(`q${next++}`, prompt, 16, 1, 1),
              new AbortController().signal,
            );
            for await (const _ of stream);
          }),
        );
        expect(engine.stats().blocks.used).toBe(0);
      };
      // Every prompt at once beside long plain requests: more KV than the 12 blocks hold, so the
      // cache preempts at least here, whatever fast-check draws after it.
      await run([
        { echo: 0 },
        { echo: 1 },
        { echo: 2 },
        { plain: 40 },
        { plain: 40 },
        { plain: 40 },
      ]);
      expect(engine.scheduler.metrics().preemptionsRecompute).toBeGreaterThan(0);
      await fc.assert(
        fc.asyncProperty(
          fc.array(
            fc.oneof(
              fc.record({ echo: fc.integer({ min: 0, max: 2 }) }),
              fc.record({ plain: fc.integer({ min: 8, max: 40 }) }),
            ),
            { minLength: 2, maxLength: 6 },
          ),
          run,
        ),
        { numRuns: 12 },
      );
    } finally {
      await own.close();
    }
  });
});

describe('stop strings in the engine', () => {
  type Choice = { text: string; deltas: string[]; logprobs: TokenLogprob[]; finish?: string };
  async function generate(req: GenerationRequest) {
    const stream = await built.engine.generate(req, new AbortController().signal);
    const choices: Choice[] = Array.from({ length: req.n }, () => ({
      text: '',
      deltas: [],
      logprobs: [],
    }));
    let completionTokens = -1;
    for await (const event of stream) {
      if (event.kind === 'usage') completionTokens = event.completionTokens;
      if (event.kind !== 'delta') continue;
      const c = choices[event.index]!;
      c.text += event.text;
      c.deltas.push(event.text);
      c.logprobs.push(...(event.logprobs ?? []));
      if (event.finishReason) c.finish = event.finishReason;
    }
    return { choices, completionTokens };
  }

  it('cuts each choice before its first stop string, across tokens, with logprobs placed in the text', async () => {
    const base = { ...request('free', [5, 17, 99, 3], 24, 2, 7), logprobs: 1 };
    const free = await generate(base);
    // Each choice's log-probabilities tile its text (no stop string: nothing held back).
    for (const c of free.choices) {
      expect(c.logprobs.map((lp) => lp.textOffset)).toEqual(
        c.logprobs.map((_, i) => c.logprobs.slice(0, i).reduce((s, lp) => s + lp.token.length, 0)),
      );
    }
    const full = free.choices[0]!.text;
    expect(full.length).toBeGreaterThan(12);
    let stoppedRuns = 0;
    for (const at of [2, 5, 9]) {
      const stop = full.slice(at, at + 3);
      const got = await generate({
        ...base,
        id: `stop${at}`,
        stopStrings: ['', stop, '\u0000never'],
      });
      for (const [i, c] of got.choices.entries()) {
        const whole = free.choices[i]!;
        const cut = whole.text.indexOf(stop);
        expect(c.text).toBe(cut < 0 ? whole.text : whole.text.slice(0, cut));
        expect(c.finish).toBe(cut < 0 ? whole.finish : 'stop');
        // Tokens whose text starts before the cut keep their log-probability and offset.
        const kept = cut < 0 ? whole.logprobs : whole.logprobs.filter((lp) => lp.textOffset < cut);
        expect(c.logprobs.map((lp) => [lp.token, lp.textOffset])).toEqual(
          kept.map((lp) => [lp.token, lp.textOffset]),
        );
        if (cut >= 0) stoppedRuns++;
      }
      // A choice's text never passes through the stop string, even partly sent.
      for (const c of got.choices) expect(c.deltas.join('')).toBe(c.text);
      expect(got.completionTokens).toBeLessThanOrEqual(free.completionTokens);
      expect(built.engine.stats().blocks.used).toBe(0);
    }
    expect(stoppedRuns).toBeGreaterThanOrEqual(3);
  });

  it('ends the request as soon as every choice met a stop string', async () => {
    const base = {
      ...request('all', [9, 8, 7], 40, 2, 3),
      sampling: { ...request('x', [], 1, 1, 0).sampling, temperature: 0 },
    };
    const free = await generate(base);
    const text = free.choices[0]!.text;
    const stop = text.slice(3, 5);
    const got = await generate({ ...base, id: 'all-stop', stopStrings: [stop] });
    expect(got.choices.map((c) => c.finish)).toEqual(['stop', 'stop']);
    expect(got.choices.map((c) => c.text)).toEqual([
      text.slice(0, text.indexOf(stop)),
      text.slice(0, text.indexOf(stop)),
    ]);
    // Greedy twins: both stop at the same token, and no token after it is generated.
    expect(got.completionTokens).toBeLessThan(free.completionTokens);
    expect(built.engine.stats().requests.running).toBe(0);
  });
});
