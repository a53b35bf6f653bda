// `pnpm --filter @kvasir/server bench [--json]`: what the HTTP layer costs. A zero-cost engine
// (it yields tokens as fast as the event loop allows) behind the real server, against a bare
// Fastify route returning a response of the same size, in the same run; and SSE streaming speed.
import { performance } from 'node:perf_hooks';
import Fastify from 'fastify';
import type { GenerationEvent, GenerationStream } from '../src/generation-events.js';
import { defineInferenceEngine, type GenerationRequest } from '../src/inference-engine.js';
import { createServer } from '../src/server.js';

const json = process.argv.includes('--json');
const REQUESTS = 2000;
const CONCURRENCY = 16;
const STREAM_TOKENS = 20000;

const engine = defineInferenceEngine({
  listModels: () => [{ id: 'bench', created: 0, ownedBy: 'bench', maxModelLen: 1 << 20 }],
  tokenize: (_m, text) => Array.from(text, (c) => c.charCodeAt(0)),
  applyChatTemplate: () => [1],
  stats: () => ({
    kvCacheUsage: 0,
    blocks: { total: 0, used: 0, cached: 0, free: 0 },
    prefixCache: { queries: 0, hits: 0 },
    requests: { running: 0, waiting: 0, preempted: 0 },
    preemptions: {},
    offloadHits: {},
  }),
  health: () => ({ status: 'ok' }),
  async generate(request: GenerationRequest): Promise<GenerationStream> {
    async function* run(): AsyncGenerator<GenerationEvent> {
      for (let i = 0; i < request.maxTokens; i++) {
        const last = i === request.maxTokens - 1;
        yield {
          kind: 'delta',
          index: 0,
          tokenIds: [i],
          text: 'tok ',
          ...(last ? { finishReason: 'length' as const } : {}),
        };
      }
      yield {
        kind: 'usage',
        promptTokens: 1,
        cachedPromptTokens: 0,
        completionTokens: request.maxTokens,
      };
    }
    return run();
  },
});

async function hammer(url: string, body: string): Promise<number> {
  let sent = 0;
  const start = performance.now();
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (sent < REQUESTS) {
        sent++;
        const res = await fetch(url, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body,
        });
        await res.arrayBuffer();
      }
    }),
  );
  return REQUESTS / ((performance.now() - start) / 1000);
}

const server = createServer({ engine, port: 0 });
const url = await server.listen();
const body = JSON.stringify({ prompt: 'hello', max_tokens: 4 });
const sample = await (
  await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body,
  })
).text();

const raw = Fastify();
raw.post('/v1/completions', async (_req, reply) => reply.type('application/json').send(sample));
await raw.listen({ port: 0, host: '127.0.0.1' });
const rawAddress = raw.server.address();
const rawUrl = `http://127.0.0.1:${typeof rawAddress === 'object' && rawAddress ? rawAddress.port : 0}`;

await hammer(`${url}/v1/completions`, body); // warm-up
const serverRps = await hammer(`${url}/v1/completions`, body);
const rawRps = await hammer(`${rawUrl}/v1/completions`, body);

const t0 = performance.now();
const res = await fetch(`${url}/v1/completions`, {
  method: 'POST',
  headers: { 'content-type': 'application/json' },
  body: JSON.stringify({ prompt: 'x', max_tokens: STREAM_TOKENS, stream: true }),
});
await res.text();
const streamTokS = STREAM_TOKENS / ((performance.now() - t0) / 1000);

await server.close(1000);
await raw.close();
const result = {
  requests: REQUESTS,
  concurrency: CONCURRENCY,
  server_rps: Math.round(serverRps),
  raw_fastify_rps: Math.round(rawRps),
  server_vs_raw: Number((serverRps / rawRps).toFixed(3)),
  sse_tokens_per_s: Math.round(streamTokS),
};
if (json) process.stdout.write(`${JSON.stringify(result)}\n`);
else for (const [k, v] of Object.entries(result)) process.stdout.write(`${k.padEnd(36)} ${v}\n`);
