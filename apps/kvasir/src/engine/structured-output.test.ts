import { mkdtempSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { GenerationRequest } from '@kvasir/server';
import { EngineError, type OutputConstraint } from '@kvasir/server/spec';
import { jsonSchemaArbitrary } from '@kvasir/test-utils';
import { Ajv } from 'ajv';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseEngineConfig } from '../config.js';
import { type BuiltEngine, buildEngine } from './bootstrap.js';

// Structured outputs through the real engine (scheduler, allocator, runner, sampler): the random
// model on the cpu and wasm backends and kvasir-mini on wasm, on a cache of 12 blocks of 8 tokens that
// an unconstrained request of 84 tokens all but fills, so recompute preemption happens while choices are
// half way through their grammar, beside unconstrained requests in the same batches.
const cacheDir = mkdtempSync(join(tmpdir(), 'kvasir-structured-'));
afterAll(async () => {
  await rm(cacheDir, { recursive: true, force: true });
});

function engineFor(model: 'random' | 'kvasir-mini', backend: 'cpu' | 'wasm'): Promise<BuiltEngine> {
  return buildEngine(
    parseEngineConfig({
      backend,
      cacheDir,
      ...(model === 'random' ? { model: 'random' } : {}),
      numGpuBlocks: 12,
      blockSize: 8,
      maxNumSeqs: 4,
      maxNumBatchedTokens: 64,
    }),
  );
}

let nextId = 0;

const SAMPLING: GenerationRequest['sampling'] = {
  temperature: 1,
  topP: 1,
  topK: 0,
  minP: 0,
  presencePenalty: 0,
  frequencyPenalty: 0,
  repetitionPenalty: 1,
};

function request(
  built: BuiltEngine,
  prompt: readonly number[],
  fields: Partial<GenerationRequest> & { seed: number },
): GenerationRequest {
  const { seed, ...rest } = fields;
  return {
    id: `so-${nextId++}`,
    model: built.engine.modelCard.id,
    promptTokens: prompt,
    n: 1,
    maxTokens: 64,
    sampling: { ...SAMPLING, seed },
    stopTokenIds: [],
    ignoreEos: false,
    ...rest,
  };
}

interface Choice {
  text: string;
  tokens: number;
  ids: number[];
  /** Tokens that came several to a delta: forced by the constraint (jump-forward). */
  jumped: number;
  finishReason?: string;
}

async function run(built: BuiltEngine, req: GenerationRequest): Promise<Choice[]> {
  const choices: Choice[] = Array.from({ length: req.n }, () => ({
    text: '',
    tokens: 0,
    ids: [],
    jumped: 0,
  }));
  const stream = await built.engine.generate(req, new AbortController().signal);
  for await (const event of stream) {
    if (event.kind !== 'delta') continue;
    const c = choices[event.index]!;
    c.text += event.text;
    c.tokens += event.tokenIds.length;
    if (event.tokenIds.length > 1) c.jumped += event.tokenIds.length;
    c.ids.push(...event.tokenIds);
    if (event.finishReason) c.finishReason = event.finishReason;
  }
  return choices;
}

// kvasir-mini runs on wasm only: on the TypeScript reference backend the few property runs its
// time allowed could all end at max_tokens, leaving the test with nothing to check (it failed
// on "stopped > 0"). The cpu backend is covered by the random model.
const MATRIX = [
  ['random', 'cpu'],
  ['random', 'wasm'],
  ['kvasir-mini', 'wasm'],
] as const;

describe.each(MATRIX)('structured outputs on the %s model, %s backend', (model, backend) => {
  it('every choice that stops is JSON valid against its random schema, under preemption and beside unconstrained requests', async () => {
    const built = await engineFor(model, backend);
    try {
      const { engine } = built;
      const vocab = engine.modelCard.vocabSize!;
      const prompt = (random: () => number, length: number) =>
        model === 'random'
          ? Array.from({ length }, () => Math.floor(random() * vocab))
          : engine.runner.codec.encode('The answer, as JSON: ');
      const ajv = new Ajv({ strict: false });
      const runs = 4;
      let stopped = 0;
      let constrained = 0;
      let neighbours = 0;
      let jumped = 0;
      await fc.assert(
        fc.asyncProperty(
          jsonSchemaArbitrary(fc),
          fc.integer({ min: 0, max: 2 ** 30 }),
          async (schema, seed) => {
            const validate = ajv.compile(schema as object);
            let s = seed;
            const random = () => {
              s = (s * 1103515245 + 12345) % 2 ** 31;
              return s / 2 ** 31;
            };
            const constraint: OutputConstraint = { kind: 'json_schema', schema };
            // Two neighbours of 84 tokens (11 blocks each, 22 between them in a 12-block cache)
            // queued first, so both run from the first steps and one preempts the other
            // whatever the constrained requests are doing (a loaded machine, or jump-forward
            // decoding, changes which requests overlap in time, not this).
            const neighbour = (k: number) =>
              run(
                built,
                request(built, prompt(random, 20), {
                  seed: seed + k,
                  maxTokens: 64,
                  ignoreEos: true,
                }),
              );
            const results = await Promise.all([
              neighbour(1),
              neighbour(3),
              run(
                built,
                request(built, prompt(random, 12), { seed, n: 2, maxTokens: 48, constraint }),
              ),
              run(
                built,
                request(built, prompt(random, 7), { seed: seed + 2, maxTokens: 48, constraint }),
              ),
            ]);
            neighbours += results[0]![0]!.tokens + results[1]![0]!.tokens;
            for (const choice of [...results[2]!, ...results[3]!]) {
              constrained++;
              jumped += choice.jumped;
              expect(['stop', 'length']).toContain(choice.finishReason);
              if (choice.finishReason !== 'stop') continue;
              stopped++;
              const value = JSON.parse(choice.text) as unknown;
              expect({
                text: choice.text,
                valid: validate(value),
                errors: validate.errors,
              }).toMatchObject({
                valid: true,
              });
            }
          },
        ),
        { numRuns: runs },
      );
      // Not vacuous: choices finished inside their grammar, neighbours decoded, forced text was
      // appended by jump-forward decoding, requests were preempted (and recomputed) on the way.
      expect(stopped).toBeGreaterThan(0);
      expect(constrained).toBe(3 * runs);
      expect(neighbours).toBeGreaterThan(0);
      expect(jumped).toBeGreaterThan(0);
      expect(engine.scheduler.metrics().preemptionsRecompute).toBeGreaterThan(0);
      expect(engine.kvCache.blocks.numUsed).toBe(0);
    } finally {
      await built.close();
    }
  });
});

describe('structured outputs: the other kinds, errors and logit bias (random model, wasm)', () => {
  let built: BuiltEngine;
  const prompt = [1, 2, 3, 4, 5];
  beforeAll(async () => {
    built = await engineFor('random', 'wasm');
  });
  afterAll(async () => {
    await built.close();
  });

  it('follows a GBNF grammar and a regex to the end', async () => {
    const grammar: OutputConstraint = {
      kind: 'grammar',
      grammar: 'root ::= ("yes" | "no") " " [0-9] [0-9]?',
      param: 'guided_grammar',
    };
    const regex: OutputConstraint = {
      kind: 'regex',
      pattern: '[a-c]{2,4}!',
      param: 'guided_regex',
    };
    for (let seed = 0; seed < 4; seed++) {
      const [g] = await run(built, request(built, prompt, { seed, constraint: grammar }));
      const [r] = await run(built, request(built, prompt, { seed, constraint: regex }));
      // The random model stops half the time it may; the grammar is short enough to finish.
      if (g!.finishReason === 'stop') expect(g!.text).toMatch(/^(yes|no) [0-9][0-9]?$/);
      else expect(g!.text).toMatch(/^(yes|no) [0-9]{2}$/);
      if (r!.finishReason === 'stop') expect(r!.text).toMatch(/^[a-c]{2,4}!$/);
    }
  });

  it('ends a constrained choice with length at max_tokens', async () => {
    const [c] = await run(
      built,
      request(built, prompt, {
        seed: 1,
        maxTokens: 3,
        constraint: {
          kind: 'json_schema',
          schema: { type: 'array', items: { type: 'integer' }, minItems: 5 },
        },
      }),
    );
    expect(c).toMatchObject({ finishReason: 'length', tokens: 3 });
    expect(c!.text.trimStart().startsWith('[')).toBe(true);
  });

  it.each<[string, Partial<GenerationRequest>, RegExp, string]>([
    [
      'a schema XGrammar rejects',
      {
        constraint: { kind: 'json_schema', schema: { type: 'nonsense' }, param: 'response_format' },
      },
      /^response_format: json_schema: .*nonsense/,
      'response_format',
    ],
    [
      'a grammar with an undefined rule',
      { constraint: { kind: 'grammar', grammar: 'root ::= missing', param: 'guided_grammar' } },
      /^guided_grammar: grammar: .*missing/,
      'guided_grammar',
    ],
    [
      'ignore_eos with a constraint',
      { constraint: { kind: 'json_object' }, ignoreEos: true },
      /^ignore_eos: /,
      'ignore_eos',
    ],
    [
      'a logit bias outside the vocabulary',
      { sampling: { ...SAMPLING, logitBias: { 512: 5 } } },
      /^logit_bias: token id 512/,
      'logit_bias',
    ],
  ])(
    'refuses %s with INVALID_REQUEST naming the field, before any decoding',
    async (_, fields, message, param) => {
      const steps = built.engine.steps;
      const error = await built.engine
        .generate(
          { ...request(built, prompt, { seed: 0 }), ...fields },
          new AbortController().signal,
        )
        .then(
          () => undefined,
          (e: unknown) => e,
        );
      expect(EngineError.isInstance(error)).toBe(true);
      expect((error as EngineError).code).toBe('INVALID_REQUEST');
      expect((error as EngineError).message).toMatch(message);
      expect((error as EngineError).details?.param).toBe(param);
      expect(built.engine.scheduler.hasUnfinished()).toBe(false);
      expect(built.engine.steps).toBe(steps);
    },
  );

  it('applies logit_bias: +100 forces a token, -100 bans it', async () => {
    const greedy = { ...SAMPLING, temperature: 0 };
    const [free] = await run(
      built,
      request(built, prompt, { seed: 3, maxTokens: 8, sampling: greedy }),
    );
    const top = free!.ids[0]!;
    const other = (top + 7) % 500;
    const [forced] = await run(
      built,
      request(built, prompt, {
        seed: 3,
        maxTokens: 8,
        sampling: { ...SAMPLING, logitBias: { [other]: 100 } },
      }),
    );
    expect(forced!.ids).toEqual(Array(8).fill(other));
    const [banned] = await run(
      built,
      request(built, prompt, {
        seed: 3,
        maxTokens: 8,
        sampling: { ...greedy, logitBias: { [top]: -100 } },
      }),
    );
    expect(banned!.ids).toHaveLength(8);
    expect(banned!.ids).not.toContain(top);
  });
});
