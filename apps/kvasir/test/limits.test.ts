import type OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { RANDOM_MODEL_NAME } from '../src/default-model.js';
import { eventually, startServer } from './harness.js';

async function fail(p: Promise<unknown>) {
  try {
    await p;
  } catch (e) {
    return e as InstanceType<typeof OpenAI.APIError>;
  }
  throw new Error('expected an error');
}

describe('admission limits and graceful shutdown (built CLI)', () => {
  it('answers 429 with Retry-After when the waiting queue is full, then 503 while draining', async () => {
    const server = await startServer([
      '--backend',
      'cpu',
      '--max-num-seqs',
      '1',
      '--max-waiting',
      '1',
    ]);
    const long = {
      model: RANDOM_MODEL_NAME,
      prompt: 'occupy the only sequence slot',
      max_tokens: 400,
      ignore_eos: true,
      stream: true,
    } as const;
    // A runs (the only slot); B waits (the only waiting place); C is refused.
    const a = await server.client.completions.create(long as never);
    const b = await server.client.completions.create(long as never);
    const refused = await fail(
      server.client.completions.create({
        model: RANDOM_MODEL_NAME,
        prompt: 'one too many',
        max_tokens: 1,
      }),
    );
    expect(refused.status).toBe(429);
    expect(Number(refused.headers?.get('retry-after'))).toBeGreaterThan(0);

    // SIGTERM: the server drains (A and B keep going), new work gets 503, health says draining.
    server.terminate();
    expect(await eventually(async () => (await fetch(`${server.url}/health`)).status === 503)).toBe(
      true,
    );
    const draining = await fail(
      server.client.completions.create({
        model: RANDOM_MODEL_NAME,
        prompt: 'too late',
        max_tokens: 1,
      }),
    );
    expect(draining.status).toBe(503);
    // In-flight streams still run to their end.
    const reasons: Array<string | null> = [];
    for (const stream of [a, b]) {
      let reason: string | null = null;
      for await (const chunk of stream as unknown as AsyncIterable<OpenAI.Completion>) {
        reason = chunk.choices[0]?.finish_reason ?? reason;
      }
      reasons.push(reason);
    }
    expect(reasons).toEqual(['length', 'length']);
    expect(await server.stop()).toBe(0);
  });
});
