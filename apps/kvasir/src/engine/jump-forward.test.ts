import { mkdtempSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { forcedTokens } from '@kvasir/engine';
import type { TokenBitmask, TokenMatcher } from '@kvasir/model';
import type { GenerationRequest } from '@kvasir/server';
import type { OutputConstraint } from '@kvasir/server/spec';
import { Ajv } from 'ajv';
import { afterAll, afterEach, describe, expect, it, vi } from 'vitest';
import { parseEngineConfig } from '../config.js';
import { wrapNextMatchers } from '../testing/wrap-matchers.js';
import { type BuiltEngine, buildEngine } from './bootstrap.js';

// Jump-forward decoding through the real engine (random model, greedy, a 14-block cache that an
// unconstrained neighbour's two choices cannot share, so requests are preempted and
// recomputed). Its claim: appending the tokens a constraint forces and computing them as one
// chunk (with the prompt, for text forced before the first token) gives the text that
// decoding them one per step gives. Greedy decoding without it only
// takes the same tokens where the model's choice agrees with the tokenizer's tokenization of
// the forced text; so the run it is compared with is one without jump-forward whose matchers
// allow only those tokens, one per step (everything else, the masks included, is the real
// engine's).
const cacheDir = mkdtempSync(join(tmpdir(), 'kvasir-jump-'));
afterAll(async () => {
  await rm(cacheDir, { recursive: true, force: true });
});
afterEach(() => {
  vi.restoreAllMocks();
});

function engine(jumpForward: boolean): Promise<BuiltEngine> {
  return buildEngine(
    parseEngineConfig({
      backend: 'cpu',
      cacheDir,
      model: 'random',
      numGpuBlocks: 14,
      blockSize: 8,
      maxNumSeqs: 4,
      maxNumBatchedTokens: 64,
      jumpForward,
    }),
  );
}

/** Allows only `token`. */
function only(token: number, vocabSize: number): TokenBitmask {
  const mask = new Int32Array((vocabSize + 31) >>> 5);
  mask[token >>> 5] = 1 << (token & 31);
  return mask;
}

/**
 * A matcher that, at the start and after each sampled token, takes the tokens jump-forward
 * would append one per step: its mask allows only the next of them.
 */
class OnePerStep implements TokenMatcher {
  #queue: number[] = [];
  #sampled = true;
  constructor(
    readonly inner: TokenMatcher,
    readonly options: Omit<Parameters<typeof forcedTokens>[1], 'room'>,
    readonly vocabSize: number,
  ) {}
  get length() {
    return this.inner.length;
  }
  get isTerminated() {
    return this.inner.isTerminated;
  }
  nextTokenBitmask(): Promise<TokenBitmask> {
    if (this.#sampled) {
      this.#sampled = false;
      this.#queue = forcedTokens(this.inner, { ...this.options, room: Number.MAX_SAFE_INTEGER });
      this.inner.rollback(this.#queue.length);
    }
    const next = this.#queue[0];
    return next === undefined
      ? this.inner.nextTokenBitmask()
      : Promise.resolve(only(next, this.vocabSize));
  }
  accept(token: number): boolean {
    if (!this.inner.accept(token)) return false;
    if (this.#queue[0] === token) this.#queue.shift();
    else this.#sampled = true;
    return true;
  }
  rollback(count: number) {
    this.inner.rollback(count);
  }
  reset() {
    this.inner.reset();
  }
  forcedText() {
    return this.inner.forcedText();
  }
  dispose() {
    this.inner.dispose();
  }
}

/** The next XGrammarCompiler made wraps its matchers in {@link OnePerStep}. */
function compileOnePerStep(built: BuiltEngine): void {
  const codec = built.engine.runner.codec;
  const stopTokens = new Set(built.engine.runner.facts.eosTokenIds);
  wrapNextMatchers(
    (matcher, vocabulary) =>
      new OnePerStep(
        matcher,
        { stopTokens, encode: codec.encodeText!, pieces: vocabulary.tokens },
        vocabulary.size,
      ),
  );
}

const GREEDY: GenerationRequest['sampling'] = {
  temperature: 0,
  topP: 1,
  topK: 0,
  minP: 0,
  presencePenalty: 0,
  frequencyPenalty: 0,
  repetitionPenalty: 1,
};

const PERSON = {
  type: 'object',
  properties: {
    name: { type: 'string', maxLength: 6 },
    age: { type: 'integer', minimum: 0, maximum: 120 },
    colour: { enum: ['red', 'green', 'blue'] },
    ok: { type: 'boolean' },
  },
  required: ['name', 'age', 'colour', 'ok'],
  additionalProperties: false,
};

const CONSTRAINTS: readonly OutputConstraint[] = [
  { kind: 'json_schema', schema: PERSON },
  { kind: 'regex', pattern: '\\{"id": [0-9]{1,3}, "status": "(active|archived)"\\}' },
  { kind: 'regex', pattern: '(alpha|beta|gamma)-release-(candidate|final)' },
  {
    kind: 'grammar',
    grammar: 'root ::= "answer: " ("yes" | "no") ", because " [a-z]{1,6} "."',
  },
];

interface Choice {
  ids: number[];
  text: string;
  finishReason?: string;
}

async function run(built: BuiltEngine, req: GenerationRequest): Promise<Choice[]> {
  const choices: Choice[] = Array.from({ length: req.n }, () => ({ ids: [], text: '' }));
  for await (const event of await built.engine.generate(req, new AbortController().signal)) {
    if (event.kind !== 'delta') continue;
    const c = choices[event.index]!;
    c.ids.push(...event.tokenIds);
    c.text += event.text;
    if (event.finishReason) c.finishReason = event.finishReason;
  }
  return choices;
}

/** Every constraint twice (two prompts), and a neighbour that forces preemptions, at once. */
async function scenario(built: BuiltEngine): Promise<Choice[][]> {
  const vocab = built.engine.modelCard.vocabSize!;
  let s = 7;
  const prompt = (length: number) =>
    Array.from({ length }, () => {
      s = (s * 1103515245 + 12345) % 2 ** 31;
      return s % vocab;
    });
  const base = { model: built.engine.modelCard.id, stopTokenIds: [], ignoreEos: false };
  const requests: GenerationRequest[] = [];
  CONSTRAINTS.forEach((constraint, i) => {
    for (const length of [5, 11]) {
      requests.push({
        ...base,
        id: `c${i}-${length}`,
        promptTokens: prompt(length),
        n: i === 3 ? 2 : 1,
        maxTokens: 60,
        sampling: GREEDY,
        constraint,
      });
    }
  });
  requests.push({
    ...base,
    id: 'neighbour',
    promptTokens: prompt(20),
    n: 2,
    maxTokens: 64,
    ignoreEos: true,
    sampling: { ...GREEDY, temperature: 1, seed: 3 },
  });
  return Promise.all(requests.map((r) => run(built, r)));
}

describe('jump-forward decoding', () => {
  it('gives the text of taking the forced tokens one per step, in fewer steps, under preemption', async () => {
    const oneByOne = await engine(false);
    const jumping = await engine(true);
    try {
      compileOnePerStep(oneByOne);
      const expected = await scenario(oneByOne);
      const actual = await scenario(jumping);
      // The neighbour ends when the cache cannot hold it, which depends on the steps: not
      // compared. Every constrained request fits the cache alone.
      expect(actual.slice(0, -1)).toEqual(expected.slice(0, -1));

      // Not vacuous: constrained choices finished, several tokens came in one delta (forced),
      // both engines preempted, and jumping took fewer steps.
      const ajv = new Ajv({ strict: false });
      const validate = ajv.compile(PERSON);
      const persons = [...actual[0]!, ...actual[1]!];
      expect(persons.some((c) => c.finishReason === 'stop')).toBe(true);
      for (const c of persons)
        if (c.finishReason === 'stop') expect(validate(JSON.parse(c.text))).toBe(true);
      expect(actual.flat().filter((c) => c.finishReason === 'stop').length).toBeGreaterThan(4);
      for (const built of [oneByOne, jumping]) {
        expect(built.engine.scheduler.metrics().preemptionsRecompute).toBeGreaterThan(0);
        expect(built.engine.kvCache.blocks.numUsed).toBe(0);
      }
      expect(jumping.engine.steps).toBeLessThan(oneByOne.engine.steps);
    } finally {
      await oneByOne.close();
      await jumping.close();
    }
  });

  it('prefills text forced before the first token with the prompt and streams it first', async () => {
    const jumping = await engine(true);
    try {
      const vocab = jumping.engine.modelCard.vocabSize!;
      const promptTokens = Array.from({ length: 9 }, (_, i) => (i * 37 + 5) % vocab);
      const request: GenerationRequest = {
        id: 'prefix',
        model: jumping.engine.modelCard.id,
        promptTokens,
        n: 2,
        maxTokens: 40,
        sampling: { ...GREEDY, temperature: 1, seed: 9 },
        stopTokenIds: [],
        ignoreEos: false,
        constraint: { kind: 'regex', pattern: '\\{"id": [0-9]{1,3}, "tag": "[a-z]{1,4}"\\}' },
      };
      const deltas: { index: number; tokenIds: readonly number[]; text: string }[] = [];
      let usage: { promptTokens: number; completionTokens: number } | undefined;
      const before = jumping.engine.steps;
      for await (const event of await jumping.engine.generate(
        request,
        new AbortController().signal,
      )) {
        if (event.kind === 'delta') deltas.push(event);
        if (event.kind === 'usage') usage = event;
      }
      for (const index of [0, 1]) {
        const mine = deltas.filter((d) => d.index === index && d.tokenIds.length > 0);
        // The first delta is the forced opening, several tokens at once, before any sample.
        expect(mine[0]!.text).toBe('{"id": ');
        expect(mine[0]!.tokenIds.length).toBeGreaterThan(1);
        const text = mine.map((d) => d.text).join('');
        expect(text).toMatch(/^\{"id": [0-9]{1,3}, "tag": "[a-z]{1,4}"\}$/);
      }
      const completion = deltas.reduce((n, d) => n + d.tokenIds.length, 0);
      expect(usage).toMatchObject({
        promptTokens: promptTokens.length,
        completionTokens: completion,
      });
      // Prefill, then one step per sampled token: the opening took none.
      const sampled = deltas.filter((d) => d.index === 0 && d.tokenIds.length > 0).length - 1;
      expect(jumping.engine.steps - before).toBeLessThanOrEqual(sampled + 1);
      expect(jumping.engine.kvCache.blocks.numUsed).toBe(0);
    } finally {
      await jumping.close();
    }
  });
});
