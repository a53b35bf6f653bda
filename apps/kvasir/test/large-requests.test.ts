import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RANDOM_MODEL_NAME } from '../src/default-model.js';
import { API_KEY, type ServerProcess, startServer } from './harness.js';

// Requests that are cheap to send and expensive to serve: a prompt of megabytes (tokenizing it
// took seconds of the event loop) and a batch echoed with its log-probabilities (a response of
// tens of megabytes built in memory). Each is refused, or kept off the event loop, before it
// costs the other clients anything.

let server: ServerProcess;

beforeAll(async () => {
  server = await startServer(['--backend', 'cpu']);
});
afterAll(async () => {
  expect(await server.stop()).toBe(0);
});

async function complete(body: Record<string, unknown>) {
  const res = await fetch(`${server.url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${API_KEY}` },
    body: JSON.stringify({ model: RANDOM_MODEL_NAME, temperature: 0, ...body }),
  });
  const text = await res.text();
  return {
    status: res.status,
    bytes: text.length,
    error: (JSON.parse(text) as { error?: { message: string; param: string | null } }).error,
  };
}

/** Seeded text of about `bytes` bytes: words the random model's tokenizer merges little. */
function text(bytes: number, seed: number): string {
  const words = ['the', 'cache', 'paged', 'block', 'token', 'request', 'engine', 'of', 'a', 'kv'];
  const parts: string[] = [];
  let s = seed;
  for (let length = 0; length < bytes; ) {
    s = (s * 1103515245 + 12345) % 2 ** 31;
    const w = words[s % words.length]!;
    parts.push(w);
    length += w.length + 1;
  }
  return parts.join(' ');
}

/**
 * Polls `/health` back to back until `done` settles; returns the slowest answer in ms. A
 * blocked event loop shows as one slow answer (the whole time it was blocked).
 */
async function slowestHealth(done: Promise<unknown>): Promise<{ worst: number; polls: number }> {
  let settled = false;
  void done.finally(() => {
    settled = true;
  });
  let worst = 0;
  let polls = 0;
  while (!settled) {
    const started = performance.now();
    const res = await fetch(`${server.url}/health`, { signal: AbortSignal.timeout(60_000) });
    expect(res.status).toBe(200);
    await res.arrayBuffer();
    worst = Math.max(worst, performance.now() - started);
    polls++;
    await new Promise((r) => setTimeout(r, 50));
  }
  return { worst, polls };
}

describe('large requests against kvasir serve (built CLI)', () => {
  it('refuses 8 prompts of 3.9 MB by their size, never tokenizing them, /health answering', async () => {
    // The random model's context is 1,024 tokens; its tokenizer's longest token is 19 bytes.
    const prompts = Array.from({ length: 8 }, (_, i) => text(3_900_000, i + 1));
    const all = Promise.all(prompts.map((prompt) => complete({ prompt, max_tokens: 4 })));
    const health = await slowestHealth(all);
    for (const r of await all) {
      expect(r.status).toBe(413);
      expect(r.error?.param).toBe('prompt');
      // Refused by its bytes (tokenizing one took 2-5 s of the event loop, then said "tokens").
      expect(r.error?.message).toMatch(/^prompt: 3\d{6} bytes of text make more than 1023 tokens/);
    }
    expect(health.worst).toBeLessThan(1000);
  });

  it('tokenizes long prompts it cannot bound off the event loop: /health answers meanwhile', async () => {
    // With kv_compression the prompt may outrun the context: it is tokenized (seconds each),
    // then refused by --kv-compression-max-prompt-tokens.
    const prompts = Array.from({ length: 2 }, (_, i) => text(1024 * 1024, 100 + i));
    const all = Promise.all(
      prompts.map((prompt) =>
        complete({ prompt, max_tokens: 4, kv_compression: { policy: 'window', window: 64 } }),
      ),
    );
    const health = await slowestHealth(all);
    for (const r of await all) {
      expect(r.status).toBe(413);
      expect(r.error?.message).toMatch(/tokens; a request with kv_compression takes at most 32768/);
    }
    // Tokenizing one on the event loop blocks it for over a second even on a quiet machine.
    expect(health.polls).toBeGreaterThan(5);
    expect(health.worst).toBeLessThan(1000);
  });

  it('refuses a 602 KiB batch echoed with 5 alternatives per token before generating it', async () => {
    // 256 prompts of 600 token ids: the answer would be about 70 MB (2.3 GiB of RSS to build).
    const prompt = Array.from({ length: 256 }, (_, p) =>
      Array.from({ length: 600 }, (_, i) => 100 + ((p * 31 + i * 7) % 300)),
    );
    const body = { prompt, max_tokens: 1, echo: true, logprobs: 5 };
    expect(JSON.stringify(body).length).toBeGreaterThan(600 * 1024);
    const before = (await server.metrics()).get('kvasir_prompt_tokens_total') ?? 0;
    const r = await complete(body);
    expect(r.status).toBe(400);
    expect(r.error?.param).toBe('logprobs');
    expect(r.error?.message).toMatch(
      /the response would be about \d+\.\d MiB .* at most 16\.0 MiB/,
    );
    // Nothing was generated.
    expect((await server.metrics()).get('kvasir_prompt_tokens_total') ?? 0).toBe(before);
    // A small batch with the same fields is answered.
    const small = await complete({
      ...body,
      prompt: prompt.slice(0, 2).map((p) => p.slice(0, 20)),
    });
    expect(small.status).toBe(200);
  });
});
