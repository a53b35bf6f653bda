import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { API_KEY, type ServerProcess, startServer } from './harness.js';

// A request with kv_compression is bounded by neither the cache nor (in cache positions) the
// context: the server's own bounds refuse what would run for minutes, with the status a client
// expects and the field it sent.

let server: ServerProcess;

beforeAll(async () => {
  server = await startServer([
    '--backend',
    'cpu',
    '--max-model-len',
    '64',
    '--kv-compression-max-prompt-tokens',
    '200',
    '--kv-compression-max-tokens',
    '50',
  ]);
});
afterAll(async () => {
  expect(await server.stop()).toBe(0);
});

async function complete(body: Record<string, unknown>) {
  const res = await fetch(`${server.url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${API_KEY}` },
    body: JSON.stringify({ model: 'kvasir-random-tiny', temperature: 0, ...body }),
  });
  return {
    status: res.status,
    error: ((await res.json()) as { error?: { message: string; param: string | null } }).error,
  };
}

const prompt = (n: number) => Array.from({ length: n }, (_, i) => (i * 7) % 500);
const sinks = { policy: 'sinks', sinks: 4, window: 28 };

describe('bounds of requests with kv_compression (real process)', () => {
  it('a prompt over --kv-compression-max-prompt-tokens is a 413 naming the bound', async () => {
    const r = await complete({ prompt: prompt(201), max_tokens: 4, kv_compression: sinks });
    expect(r.status).toBe(413);
    expect(r.error?.param).toBe('prompt');
    expect(r.error?.message).toMatch(/201 tokens; a request with kv_compression takes at most 200/);
  });

  it('a max_tokens over --kv-compression-max-tokens is a 400 naming max_tokens', async () => {
    const r = await complete({ prompt: prompt(10), max_tokens: 51, kv_compression: sinks });
    expect(r.status).toBe(400);
    expect(r.error?.param).toBe('max_tokens');
    expect(r.error?.message).toMatch(/generates at most 50 tokens/);
  });

  it('a prompt over the context for a policy that cannot stream it is a 413 naming the prompt', async () => {
    const snapkv = { policy: 'snapkv', budget: 32 };
    const r = await complete({ prompt: prompt(100), max_tokens: 4, kv_compression: snapkv });
    expect(r.status).toBe(413);
    expect(r.error?.param).toBe('prompt');
    expect(r.error?.message).toMatch(/100 tokens, over the context of 64/);
    expect(r.error?.message).not.toMatch(/promptTokenIds/);
  });

  it('within the bounds, a streamed prompt past the context is served', async () => {
    const r = await complete({ prompt: prompt(150), max_tokens: 50, kv_compression: sinks });
    expect(r.status).toBe(200);
  });
});
