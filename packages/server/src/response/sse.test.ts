import { createServer, type Server, type ServerResponse } from 'node:http';
import { connect } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { EngineError } from '../errors.js';
import type { GenerationEvent } from '../generation-events.js';
import type { GenerationRequest } from '../inference-engine.js';
import { ServerMetrics } from '../metrics.js';
import type { PreparedRequest } from '../request/prepare.js';
import { sseWriter, streamResponse } from './sse.js';

const stats = () => ({
  kvCacheUsage: 0,
  blocks: { total: 0, used: 0, cached: 0, free: 0 },
  prefixCache: { queries: 0, hits: 0 },
  requests: { running: 0, waiting: 0, preempted: 0 },
  preemptions: {},
  offloadHits: {},
});

const request: GenerationRequest = {
  id: 'chatcmpl-1',
  model: 'm',
  promptTokens: [1],
  n: 1,
  maxTokens: 4,
  sampling: {
    temperature: 1,
    topP: 1,
    topK: 0,
    minP: 0,
    presencePenalty: 0,
    frequencyPenalty: 0,
    repetitionPenalty: 1,
  },
  logprobs: 0,
  stopTokenIds: [],
  ignoreEos: false,
};

let server: Server | undefined;
afterEach(() => server?.close());

/** Serves one SSE response over a real socket and returns the events the client read. */
async function stream(kind: 'chat' | 'completion', list: GenerationEvent[], error?: unknown) {
  const prepared: PreparedRequest = {
    kind,
    requests: [request],
    echo: false,
    promptTexts: [undefined],
    stream: true,
    includeUsage: true,
    created: 9,
  };
  async function* events() {
    for (const e of list) yield e;
    if (error) throw error;
  }
  server = createServer((_req, res) => {
    void streamResponse(
      prepared,
      events(),
      res,
      new AbortController().signal,
      0,
      new ServerMetrics(stats),
    );
  });
  await new Promise<void>((resolve) => server!.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : 0;
  const res = await fetch(`http://127.0.0.1:${port}/`);
  expect(res.headers.get('content-type')).toBe('text/event-stream; charset=utf-8');
  return (await res.text())
    .split('\n\n')
    .filter((chunk) => chunk !== '')
    .map((chunk) => chunk.replace(/^data: /, ''))
    .map((data) => (data === '[DONE]' ? data : JSON.parse(data)));
}

const lp = { tokenId: 5, token: 'hi', logprob: -1, top: [], textOffset: 0 };

describe('streamResponse', () => {
  it('streams chat: a role chunk, content chunks, an empty delta with the finish, usage, [DONE]', async () => {
    const out = await stream('chat', [
      { kind: 'delta', index: 0, tokenIds: [5], text: 'hi', logprobs: [lp] },
      { kind: 'delta', index: 0, tokenIds: [6], text: '', finishReason: 'stop' },
      { kind: 'usage', promptTokens: 1, cachedPromptTokens: 0, completionTokens: 2 },
    ]);
    expect(
      out.map((c) => (c === '[DONE]' ? c : [c.choices[0]?.delta, c.choices[0]?.finish_reason])),
    ).toEqual([
      [{ role: 'assistant', content: '' }, null],
      [{ content: 'hi' }, null],
      [{}, 'stop'],
      [undefined, undefined],
      '[DONE]',
    ]);
    expect(out[1].choices[0].logprobs.content[0]).toMatchObject({ token: 'hi', bytes: [104, 105] });
    expect(out[3]).toMatchObject({
      object: 'chat.completion.chunk',
      id: 'chatcmpl-1',
      created: 9,
      usage: { total_tokens: 3 },
    });
  });

  it('streams completions with text offsets, and ends an engine failure with an error event', async () => {
    const out = await stream(
      'completion',
      [{ kind: 'delta', index: 0, tokenIds: [5], text: 'hi', logprobs: [lp] }],
      new EngineError('INTERNAL', 'step failed'),
    );
    expect(out[0]).toMatchObject({
      object: 'text_completion',
      choices: [{ text: 'hi', logprobs: { text_offset: [0] } }],
    });
    expect(out.slice(1)).toEqual([
      {
        error: {
          message: 'internal server error',
          type: 'internal_error',
          param: null,
          code: 'internal_error',
        },
      },
      '[DONE]',
    ]);
  });
});

describe('sseWriter', () => {
  /**
   * Opens a response to a raw client that sends a request and never reads, fills it with events
   * until the writer has to wait, and returns that wait and the response.
   */
  async function stalledWrite(signal: AbortSignal | undefined, stallMs: number) {
    const responses: ServerResponse[] = [];
    server = createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      responses.push(res);
    });
    await new Promise<void>((resolve) => server!.listen(0, '127.0.0.1', resolve));
    const address = server.address();
    const port = typeof address === 'object' && address ? address.port : 0;
    const client = connect({ port, host: '127.0.0.1' });
    client.on('error', () => {});
    client.write('GET / HTTP/1.1\r\nhost: x\r\n\r\n');
    // Never read: the kernel's buffers fill, then the response's own.
    client.pause();
    while (responses.length === 0) await new Promise((r) => setTimeout(r, 5));
    const res = responses[0]!;
    const write = sseWriter(res, signal, stallMs);
    const chunk = 'x'.repeat(64 * 1024);
    for (let i = 0; i < 4096; i++) {
      const started = Date.now();
      const pending = write(chunk);
      // A write that waited is the one the stalled client holds up.
      const waited = await Promise.race([
        pending.then(() => false),
        new Promise<boolean>((r) => setTimeout(() => r(true), 50)),
      ]);
      if (waited) return { pending, res, client, started };
    }
    throw new Error('the client never held a write up');
  }

  it('closes the socket of a client that reads nothing for stallMs', async () => {
    const { pending, res, client, started } = await stalledWrite(undefined, 300);
    await pending;
    expect(Date.now() - started).toBeGreaterThanOrEqual(250);
    expect(res.destroyed).toBe(true);
    client.destroy();
  });

  it('closes it at once when the request is aborted while the writer waits', async () => {
    const controller = new AbortController();
    const { pending, res, client, started } = await stalledWrite(controller.signal, 60_000);
    controller.abort();
    await pending;
    expect(Date.now() - started).toBeLessThan(10_000);
    expect(res.destroyed).toBe(true);
    client.destroy();
  });
});
