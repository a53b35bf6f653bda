import { jsonSchemaArbitrary } from '@kvasir/test-utils';
import { Ajv } from 'ajv';
import fc from 'fast-check';
import type OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ServerProcess, startServer } from './harness.js';

// Structured outputs through a real `kvasir serve` (random model, jump-forward on) whose KV cache
// is 12 blocks of 8 tokens: two unconstrained neighbours of 84 tokens (11 blocks each) are
// queued first in every run, so one preempts the other whatever the constrained requests
// beside them are doing, and those are preempted and recomputed along the way. Every
// constrained answer that ends with `stop` must satisfy its constraint: a random JSON schema
// (Ajv), a random regex over a small alphabet, or a random list of choices.

const ajv = new Ajv({ strict: false });
let server: ServerProcess;
let model: string;

beforeAll(async () => {
  server = await startServer([
    '--num-gpu-blocks',
    '12',
    '--block-size',
    '8',
    '--max-num-seqs',
    '4',
    '--max-num-batched-tokens',
    '64',
  ]);
  model = (await server.client.models.list()).data[0]!.id;
}, 120_000);
afterAll(async () => {
  expect(await server.stop()).toBe(0);
});

/** A regex of literal pieces, character classes with bounds, and alternations. */
const regexArbitrary = fc
  .array(
    fc.oneof(
      fc.stringMatching(/^[a-z]{1,6}$/),
      fc
        .tuple(fc.constantFrom('[0-9]', '[a-c]', '[A-Z]'), fc.nat(3), fc.nat(3))
        .map(([cls, lo, extra]) => `${cls}{${lo},${lo + extra + 1}}`),
      fc
        .array(fc.stringMatching(/^[a-z]{1,5}$/), { minLength: 2, maxLength: 3 })
        .map((words) => `(${words.join('|')})`),
      fc.constantFrom('-', ': ', '\\{', '\\}', '"'),
    ),
    { minLength: 1, maxLength: 6 },
  )
  .map((pieces) => pieces.join(''));

const constraintArbitrary: fc.Arbitrary<Constraint> = fc.oneof(
  jsonSchemaArbitrary(fc).map((schema: unknown) => ({ kind: 'json_schema' as const, schema })),
  regexArbitrary.map((pattern) => ({ kind: 'regex' as const, pattern })),
  fc
    .uniqueArray(fc.stringMatching(/^[a-z][a-z ]{0,10}$/), { minLength: 2, maxLength: 5 })
    .map((choices) => ({ kind: 'choice' as const, choices })),
);
type Constraint =
  | { readonly kind: 'json_schema'; readonly schema: unknown }
  | { readonly kind: 'regex'; readonly pattern: string }
  | { readonly kind: 'choice'; readonly choices: readonly string[] };

/** The request fields of a constraint, and what checks its answer. */
function fieldsOf(c: Constraint): {
  fields: Record<string, unknown>;
  valid: (s: string) => boolean;
} {
  switch (c.kind) {
    case 'json_schema': {
      const validate = ajv.compile(c.schema as object);
      return {
        fields: {
          response_format: { type: 'json_schema', json_schema: { name: 'x', schema: c.schema } },
        },
        valid: (s) => validate(JSON.parse(s)),
      };
    }
    case 'regex': {
      const re = new RegExp(`^(?:${c.pattern})$`);
      return { fields: { guided_regex: c.pattern }, valid: (s) => re.test(s) };
    }
    case 'choice':
      return { fields: { guided_choice: c.choices }, valid: (s) => c.choices.includes(s) };
  }
}

/** A constrained chat request, streamed or not: its answers with their finish reasons. */
async function constrained(
  c: Constraint,
  seed: number,
  stream: boolean,
): Promise<{ text: string; finish: string | null }[]> {
  const body = {
    model,
    messages: [{ role: 'user' as const, content: `Answer ${seed}` }],
    max_tokens: 48,
    n: 2,
    seed,
    ...fieldsOf(c).fields,
  };
  if (!stream) {
    const res = await server.client.chat.completions.create(body as never);
    return (res as OpenAI.ChatCompletion).choices.map((ch) => ({
      text: ch.message.content ?? '',
      finish: ch.finish_reason,
    }));
  }
  const answers = [
    { text: '', finish: null as string | null },
    { text: '', finish: null as string | null },
  ];
  const events = await server.client.chat.completions.create({ ...body, stream: true } as never);
  for await (const chunk of events as unknown as AsyncIterable<OpenAI.ChatCompletionChunk>) {
    for (const ch of chunk.choices) {
      answers[ch.index]!.text += ch.delta.content ?? '';
      if (ch.finish_reason) answers[ch.index]!.finish = ch.finish_reason;
    }
  }
  return answers;
}

function neighbour(seed: number): Promise<unknown> {
  return server.client.completions.create({
    model,
    prompt: Array.from({ length: 20 }, (_, i) => (seed * 31 + i * 7) % 500),
    max_tokens: 64,
    seed,
    ignore_eos: true,
  } as never);
}

describe('structured outputs through kvasir serve under preemption', () => {
  it('every constrained answer that stops satisfies its constraint', async () => {
    const preemptedBefore = await preemptions();
    let stopped = 0;
    let answers = 0;
    await fc.assert(
      fc.asyncProperty(
        constraintArbitrary,
        constraintArbitrary,
        fc.integer({ min: 0, max: 2 ** 30 }),
        async (a, b, seed) => {
          const [, , first, second] = await Promise.all([
            neighbour(seed),
            neighbour(seed + 1),
            constrained(a, seed, false),
            constrained(b, seed + 2, true),
          ]);
          for (const [c, list] of [
            [a, first],
            [b, second],
          ] as const) {
            const { valid } = fieldsOf(c);
            for (const answer of list) {
              answers++;
              expect(['stop', 'length']).toContain(answer.finish);
              if (answer.finish !== 'stop') continue;
              stopped++;
              expect({ constraint: c, text: answer.text, valid: valid(answer.text) }).toMatchObject(
                {
                  valid: true,
                },
              );
            }
          }
        },
      ),
      { numRuns: 6 },
    );
    // Not vacuous: answers finished inside their constraints, and the server preempted.
    expect(answers).toBe(6 * 4);
    expect(stopped).toBeGreaterThan(0);
    expect(await preemptions()).toBeGreaterThan(preemptedBefore);
    const m = await server.metrics();
    expect(m.get('kvasir_kv_blocks{state="used"}') ?? 0).toBe(0);
  }, 600_000);
});

async function preemptions(): Promise<number> {
  let total = 0;
  for (const [series, value] of await server.metrics()) {
    if (series.startsWith('kvasir_preemptions_total')) total += value;
  }
  return total;
}
