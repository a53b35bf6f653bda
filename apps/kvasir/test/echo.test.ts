import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  loadModel,
  logprobs,
  type Model,
  ModelTokenizer,
  makeModelConfig,
  writeRandomCheckpoint,
} from '@kvasir/model';
import fc from 'fast-check';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { API_KEY, type ServerProcess, startServer } from './harness.js';

const MODEL = 'echo-random';

// A step budget of 16 tokens splits every prompt below into several prefill chunks, so the
// prompt log-probabilities are gathered across chunks.
const BUDGET = 16;

let server: ServerProcess;
let tokenizer: ModelTokenizer;
let reference: Model;
let tmp: string;

beforeAll(async () => {
  tmp = await mkdtemp(join(tmpdir(), 'kvasir-echo-'));
  const dir = join(tmp, MODEL);
  const config = makeModelConfig({
    architecture: 'llama',
    hiddenSize: 128,
    intermediateSize: 256,
    numLayers: 2,
    numHeads: 4,
    numKvHeads: 2,
    vocabSize: 384,
    maxPositionEmbeddings: 256,
    tieWordEmbeddings: false,
  });
  await writeRandomCheckpoint(dir, config, 5);
  server = await startServer([
    '--model',
    dir,
    '--backend',
    'cpu',
    '--max-num-batched-tokens',
    String(BUDGET),
    '--block-size',
    '8',
  ]);
  tokenizer = await ModelTokenizer.load(dir);
  // The model's own forward pass, outside the engine: one sequence, every row's logits.
  reference = await loadModel(dir, { backend: 'cpu', kvFormat: 'f32', numBlocks: 64 });
});

afterAll(async () => {
  await reference?.destroy();
  expect(await server.stop()).toBe(0);
  await rm(tmp, { recursive: true, force: true });
});

/** Log-probability of each prompt token given the ones before it (first: null), and top-1. */
async function referenceScores(ids: readonly number[]) {
  const n = ids.length;
  const positions = Int32Array.from({ length: n }, (_, i) => i);
  const logits = await reference.forward({
    tokenIds: Int32Array.from(ids),
    positions,
    slotMapping: positions,
    rows: [
      {
        queryStart: 0,
        queryLen: n,
        contextLen: n,
        blockTable: Array.from({ length: Math.ceil(n / 16) }, (_, b) => b),
      },
    ],
    logitsIndices: positions,
  });
  const vocab = logits.length / n;
  const row = (i: number) => logits.subarray(i * vocab, (i + 1) * vocab);
  const scores: (number | null)[] = [null];
  const top: (number | null)[] = [null];
  for (let i = 1; i < n; i++) {
    const lp = logprobs(row(i - 1), ids[i]!, 1);
    scores.push(lp.logprob);
    top.push(lp.top[0]!.token);
  }
  // The greedy next token after the prompt and its log-probability.
  const next = logprobs(row(n - 1), 0, 1).top[0]!;
  return { scores, top, next };
}

function expectClose(actual: readonly (number | null)[], expected: readonly (number | null)[]) {
  expect(actual).toHaveLength(expected.length);
  actual.forEach((a, i) => {
    const e = expected[i];
    if (e === null || e === undefined) expect(a).toBeNull();
    else expect(Math.abs(a! - e)).toBeLessThan(1e-4);
  });
}

interface LegacyLogprobs {
  tokens: string[];
  token_logprobs: (number | null)[];
  top_logprobs: (Record<string, number> | null)[] | null;
  text_offset: number[];
}

describe('echo with logprobs on the real engine (built CLI, CPU backend)', () => {
  it('scores a prompt with max_tokens 0 through the official client, as the model does', async () => {
    const prompt = 'The paged KV cache keeps every token of the prompt in blocks of eight.';
    const ids = tokenizer.encode(prompt);
    expect(ids.length).toBeGreaterThan(2 * BUDGET);
    const res = await server.client.completions.create({
      model: MODEL,
      prompt,
      max_tokens: 0,
      echo: true,
      logprobs: 1,
      temperature: 0,
    });
    const choice = res.choices[0]!;
    expect(choice.text).toBe(prompt);
    expect(choice.finish_reason).toBe('length');
    expect(res.usage!.completion_tokens).toBe(0);
    const lp = choice.logprobs as unknown as LegacyLogprobs;
    const ref = await referenceScores(ids);
    expect(lp.tokens).toEqual(ids.map((id) => tokenizer.decode([id])));
    expectClose(lp.token_logprobs, ref.scores);
    expect(lp.top_logprobs![0]).toBeNull();
    for (let i = 1; i < ids.length; i++) {
      const [token, value] = Object.entries(lp.top_logprobs![i]!)[0]!;
      expect(token).toBe(tokenizer.decode([ref.top[i]!]));
      expect(value).toBeGreaterThanOrEqual(lp.token_logprobs[i]! - 1e-6);
    }
  });

  it('answers a batch of token-id prompts exactly as lm-evaluation-harness sends it', async () => {
    const prompts = [
      tokenizer.encode('Continuous batching runs decodes first, then prefill chunks.'),
      tokenizer.encode('Short one.'),
      tokenizer.encode('A third prompt, long enough to be split into more than one chunk here.'),
    ];
    // A prompt that ends in the model's own greedy continuation: the harness reads it as greedy.
    const greedy = tokenizer.encode('Greedy ending:');
    for (let i = 0; i < 2; i++) greedy.push((await referenceScores(greedy)).next.token);
    prompts.push(greedy);
    const response = await fetch(`${server.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${API_KEY}` },
      body: JSON.stringify({
        model: MODEL,
        prompt: prompts,
        max_tokens: 1,
        temperature: 0,
        logprobs: 1,
        echo: true,
        seed: 1234,
      }),
    });
    expect(response.status).toBe(200);
    const body = (await response.json()) as {
      choices: { index: number; logprobs: LegacyLogprobs }[];
    };
    expect(body.choices.map((c) => c.index)).toEqual([0, 1, 2, 3]);
    for (const [p, ids] of prompts.entries()) {
      const lp = body.choices[p]!.logprobs;
      const ref = await referenceScores(ids);
      // The harness reads [ctxlen:-1]: the prompt's entries, then one generated token.
      expectClose(lp.token_logprobs.slice(0, -1), ref.scores);
      expect(lp.tokens).toHaveLength(ids.length + 1);
      expect(Math.abs(lp.token_logprobs.at(-1)! - ref.next.logprob)).toBeLessThan(1e-4);
      expect(lp.tokens.at(-1)).toBe(tokenizer.decode([ref.next.token]));
      // What the harness's parse_logprobs computes for a continuation of the last 2 tokens.
      const ctxlen = ids.length - 2;
      const continuation = lp.token_logprobs.slice(ctxlen, -1) as number[];
      const tops = lp.top_logprobs!.slice(ctxlen, -1) as Record<string, number>[];
      const sum = continuation.reduce((a, b) => a + b, 0);
      const isGreedy = continuation.every((x, i) => x === Math.max(...Object.values(tops[i]!)));
      const want = ref.scores.slice(ctxlen) as number[];
      expect(Math.abs(sum - want.reduce((a, b) => a + b, 0))).toBeLessThan(1e-4);
      expect(isGreedy).toBe(ids.slice(ctxlen).every((id, i) => id === ref.top[ctxlen + i]));
      if (ids === greedy) expect(isGreedy).toBe(true);
    }
  });

  it('recomputes a cached prefix for echo requests, whose blocks then serve others', async () => {
    const prompt = 'A prompt sent twice: the second time its blocks are in the prefix cache.';
    const ids = tokenizer.encode(prompt);
    const plain = { model: MODEL, prompt, max_tokens: 1, temperature: 0 };
    await server.client.completions.create(plain);
    const echoed = await server.client.completions.create({ ...plain, echo: true, logprobs: 0 });
    const cached = (u: unknown) =>
      (u as { prompt_tokens_details: { cached_tokens: number } }).prompt_tokens_details
        .cached_tokens;
    expect(cached(echoed.usage)).toBe(0);
    const lp = echoed.choices[0]!.logprobs as unknown as LegacyLogprobs;
    expectClose(lp.token_logprobs.slice(0, -1), (await referenceScores(ids)).scores);
    expect(lp.top_logprobs).toBeNull();
    const again = await server.client.completions.create(plain);
    expect(cached(again.usage)).toBeGreaterThan(0);
  });

  it('places every echoed token in the returned text, BOS at 0 (fast-check over prompts)', async () => {
    const prompt = fc
      .array(
        fc.oneof(
          fc.constantFrom('The', ' cache', ' paged', '  ', '\n', 'é', '日本', '🙂', '42', '!'),
          fc.string({ unit: 'grapheme', maxLength: 4 }),
        ),
        { minLength: 1, maxLength: 16 },
      )
      .map((parts) => parts.join(''))
      .filter((p) => p.length > 0 && tokenizer.encode(p).length < 200);
    await fc.assert(
      fc.asyncProperty(prompt, async (text) => {
        const ids = tokenizer.encode(text);
        expect(ids[0]).toBe(tokenizer.bosTokenId);
        const res = await server.client.completions.create({
          model: MODEL,
          prompt: text,
          max_tokens: 3,
          echo: true,
          logprobs: 1,
          temperature: 0,
        });
        const choice = res.choices[0]!;
        const lp = choice.logprobs as unknown as LegacyLogprobs;
        const offsets = lp.text_offset;
        expect(choice.text.startsWith(text)).toBe(true);
        expect(offsets).toHaveLength(lp.tokens.length);
        offsets.forEach((offset, i) => {
          expect(offset).toBeGreaterThanOrEqual(i === 0 ? 0 : offsets[i - 1]!);
          expect(offset).toBeLessThanOrEqual(choice.text.length);
        });
        // The text before each prompt token is what the tokens before it decode to (where that
        // ends on a whole character): the BOS and the first token both start at 0.
        for (let i = 0; i < ids.length; i++) {
          const before = tokenizer.decode(ids.slice(0, i), { skipSpecialTokens: true });
          if (!before.endsWith('\uFFFD')) expect(choice.text.slice(0, offsets[i])).toBe(before);
        }
        // The generated tokens follow the echoed prompt.
        for (let i = ids.length; i < offsets.length; i++) {
          expect(offsets[i]).toBeGreaterThanOrEqual(text.length);
        }
      }),
      { numRuns: 25 },
    );
  });

  it('refuses echo with stream with a 400 naming echo', async () => {
    try {
      await server.client.completions.create({
        model: MODEL,
        prompt: 'x',
        echo: true,
        stream: true,
      });
      expect.unreachable();
    } catch (error) {
      expect(error).toBeInstanceOf(OpenAI.APIError);
      expect((error as InstanceType<typeof OpenAI.APIError>).status).toBe(400);
      expect((error as InstanceType<typeof OpenAI.APIError>).param).toBe('echo');
    }
  });
});
