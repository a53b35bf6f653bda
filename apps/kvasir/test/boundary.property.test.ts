import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RANDOM_MODEL_NAME } from '../src/default-model.js';
import { API_KEY, type ServerProcess, startServer } from './harness.js';

// The HTTP boundary of the real `kvasir serve` process (built CLI, --model random, CPU
// backend) under random and mutated bodies: client input never gets a 5xx, never stops the
// engine, and a fixed greedy request answers the same before and after.

let server: ServerProcess;

beforeAll(async () => {
  // A short context bounds what any random body can ask the engine to generate.
  server = await startServer(['--backend', 'cpu', '--max-model-len', '64', '--max-num-seqs', '8']);
});

afterAll(async () => {
  expect(await server.stop()).toBe(0);
});

async function post(path: string, body: string): Promise<{ status: number; text: string }> {
  const res = await fetch(`${server.url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${API_KEY}` },
    body,
  });
  return { status: res.status, text: await res.text() };
}

const fixed = JSON.stringify({
  model: RANDOM_MODEL_NAME,
  prompt: 'The paged KV cache',
  max_tokens: 8,
  temperature: 0,
  ignore_eos: true,
});

const completionBase = {
  model: RANDOM_MODEL_NAME,
  prompt: 'Hello',
  max_tokens: 4,
  temperature: 0,
};
const chatBase = {
  model: RANDOM_MODEL_NAME,
  messages: [{ role: 'user', content: 'Hello' }],
  max_tokens: 4,
};

/** Values that probe types and ranges: numbers at and past limits, wrong types, huge ids. */
const oddValue = fc.oneof(
  fc.constantFrom(
    null,
    true,
    '',
    -1,
    0,
    0.5,
    1e300,
    -1e300,
    2 ** 31,
    2 ** 53,
    999_999_999,
    [],
    {},
    [999_999_999, 5],
    [-3],
    [[1, 2]],
    ['x'],
    [{ role: 'user' }],
    [{ role: 'user', content: [{ type: 'text', text: 'hi' }] }],
    [{ role: 'robot', content: 'hi' }],
    '\u0000\uffff\ud800',
  ),
  fc.integer({ min: -5, max: 80 }),
  fc.double(),
  fc.string({ maxLength: 40 }),
  fc.array(fc.integer({ min: -2, max: 1_000_000 }), { maxLength: 6 }),
  fc.jsonValue({ maxDepth: 2 }),
);

const fields = [
  'model',
  'prompt',
  'messages',
  'max_tokens',
  'max_completion_tokens',
  'n',
  'best_of',
  'temperature',
  'top_p',
  'top_k',
  'min_p',
  'seed',
  'stop',
  'stop_token_ids',
  'logprobs',
  'top_logprobs',
  'echo',
  'stream',
  'stream_options',
  'ignore_eos',
  'presence_penalty',
  'repetition_penalty',
  'response_format',
  'tools',
  'logit_bias',
  'user',
];

const mutation = fc.oneof(
  fc.record({
    kind: fc.constant('set' as const),
    key: fc.constantFrom(...fields),
    value: oddValue,
  }),
  fc.record({ kind: fc.constant('delete' as const), key: fc.constantFrom(...fields) }),
  fc.record({
    kind: fc.constant('extra' as const),
    key: fc.string({ maxLength: 12 }),
    value: oddValue,
  }),
);

/** A body: a valid base with random mutations, or random JSON, or bytes that are not JSON. */
const body = fc.oneof(
  {
    weight: 6,
    arbitrary: fc
      .tuple(fc.boolean(), fc.array(mutation, { maxLength: 4 }))
      .map(([chat, mutations]) => {
        const b: Record<string, unknown> = structuredClone(chat ? chatBase : completionBase);
        for (const m of mutations) {
          if (m.kind === 'delete') delete b[m.key];
          else b[m.key] = m.value;
        }
        return JSON.stringify(b);
      }),
  },
  { weight: 2, arbitrary: fc.json({ maxDepth: 3 }) },
  { weight: 1, arbitrary: fc.string({ maxLength: 60 }) },
);

describe('the HTTP boundary of kvasir serve under random bodies (fast-check)', () => {
  it('never answers 5xx to client input, never stops, and answers a greedy request the same after', async () => {
    const before = await post('/v1/completions', fixed);
    expect(before.status).toBe(200);
    const reference = JSON.parse(before.text).choices[0].text as string;
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom('/v1/completions', '/v1/chat/completions'),
        body,
        async (path, text) => {
          const res = await post(path, text);
          if (res.status >= 500) throw new Error(`${res.status} for ${path} ${text}: ${res.text}`);
          if (res.status >= 400) {
            const parsed = JSON.parse(res.text) as { error: Record<string, unknown> };
            expect(Object.keys(parsed.error).sort()).toEqual(['code', 'message', 'param', 'type']);
          }
        },
      ),
      { numRuns: 150 },
    );
    expect((await fetch(`${server.url}/health`)).status).toBe(200);
    const after = await post('/v1/completions', fixed);
    expect(after.status).toBe(200);
    expect(JSON.parse(after.text).choices[0].text).toBe(reference);
    const metrics = await server.metrics();
    expect(metrics.get('kvasir_engine_failed_steps_total')).toBe(0);
    expect(metrics.get('kvasir_kv_blocks{state="used"}')).toBe(0);
  });

  it('the request that used to kill the engine is a 400 and the engine stays healthy', async () => {
    const res = await post(
      '/v1/completions',
      JSON.stringify({ prompt: [999_999_999, 5], max_tokens: 4 }),
    );
    expect(res.status).toBe(400);
    expect(JSON.parse(res.text).error).toMatchObject({
      type: 'invalid_request_error',
      param: 'prompt',
    });
    expect((await fetch(`${server.url}/health`)).status).toBe(200);
    expect((await post('/v1/completions', fixed)).status).toBe(200);
  });
});
