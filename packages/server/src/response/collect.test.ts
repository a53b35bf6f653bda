import { describe, expect, it } from 'vitest';
import { EngineError } from '../errors.js';
import type { GenerationEvent } from '../generation-events.js';
import type { GenerationRequest } from '../inference-engine.js';
import { ServerMetrics } from '../metrics.js';
import type { PreparedRequest } from '../request/prepare.js';
import { readGeneration } from './choices.js';
import { collectResponse } from './collect.js';

const stats = () => ({
  kvCacheUsage: 0,
  blocks: { total: 0, used: 0, cached: 0, free: 0 },
  prefixCache: { queries: 0, hits: 0 },
  requests: { running: 0, waiting: 0, preempted: 0 },
  preemptions: {},
  offloadHits: {},
});

const request = (id: string, n = 2, extra: Partial<GenerationRequest> = {}): GenerationRequest => ({
  id,
  model: 'm',
  promptTokens: [1, 2, 3],
  n,
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
  stopTokenIds: [],
  ignoreEos: false,
  ...extra,
});

async function* events(list: readonly GenerationEvent[], error?: unknown) {
  for (const e of list) yield e;
  if (error) throw error;
}

const delta = (index: number, text: string, extra: object = {}): GenerationEvent => ({
  kind: 'delta',
  index,
  tokenIds: [7],
  text,
  ...extra,
});

describe('readGeneration', () => {
  it('emits visible changes only, ignores a finished choice and counts usage when the engine gives none', async () => {
    const seen: unknown[] = [];
    const tally = await readGeneration(
      request('a'),
      events([
        delta(0, 'x'),
        delta(1, ''),
        delta(9, 'out of range'),
        delta(0, 'y', { finishReason: 'stop' }),
        delta(0, 'late'),
      ]),
      new AbortController().signal,
      0,
      new ServerMetrics(stats),
      (i, e) => {
        seen.push([i, e.text, e.finishReason]);
      },
    );
    expect(seen).toEqual([
      [0, 'x', undefined],
      [0, 'y', 'stop'],
    ]);
    // Choice 1 never finished: cut short.
    expect(tally.finishReasons).toEqual(['stop', 'abort']);
    expect(tally.usage).toEqual({ promptTokens: 3, cachedPromptTokens: 0, completionTokens: 4 });
  });

  it('throws the abort reason when it is an EngineError, and ends quietly for a client that left', async () => {
    const timeout = new AbortController();
    timeout.abort(new EngineError('TIMEOUT', 'too slow'));
    const read = (signal: AbortSignal) =>
      readGeneration(
        request('a', 1),
        events([delta(0, 'x')], new Error('aborted')),
        signal,
        0,
        new ServerMetrics(stats),
        () => {},
      );
    await expect(read(timeout.signal)).rejects.toMatchObject({ code: 'TIMEOUT' });
    const left = new AbortController();
    left.abort(new Error('client disconnected'));
    expect((await read(left.signal)).finishReasons).toEqual(['abort']);
    await expect(read(new AbortController().signal)).rejects.toThrow('aborted');
  });
});

describe('collectResponse', () => {
  const prepared = (over: Partial<PreparedRequest>): PreparedRequest => ({
    kind: 'completion',
    requests: [request('cmpl-1'), request('cmpl-1-1')],
    echo: false,
    promptTexts: ['p0', 'p1'],
    stream: false,
    includeUsage: false,
    created: 5,
    ...over,
  });
  const usage = (completionTokens: number): GenerationEvent => ({
    kind: 'usage',
    promptTokens: 3,
    cachedPromptTokens: 1,
    completionTokens,
  });

  it('numbers a batch prompt p choice i as p * n + i, echoes the prompt as sent and sums usage', async () => {
    const lp = { tokenId: 7, token: 'b', logprob: -1, top: [], textOffset: 0 };
    const echoed = {
      kind: 'prompt' as const,
      text: 'decoded',
      logprobs: [{ tokenId: 1, token: 'p', logprob: null, top: null, textOffset: 0 }],
    };
    type Completion = {
      choices: {
        index: number;
        text: string;
        finish_reason: string;
        logprobs: { text_offset: number[] };
      }[];
      usage: unknown;
    };
    const out = (await collectResponse(
      prepared({
        echo: true,
        requests: [request('cmpl-1', 2, { logprobs: 0 }), request('cmpl-1-1', 2, { logprobs: 0 })],
      }),
      [
        events([
          echoed,
          delta(0, 'a', { logprobs: [lp], finishReason: 'length' }),
          delta(1, 'b', { finishReason: 'stop' }),
          usage(2),
        ]),
        events([
          echoed,
          delta(1, 'c', { finishReason: 'length' }),
          delta(0, 'd', { finishReason: 'length' }),
          usage(3),
        ]),
      ],
      new AbortController(),
      0,
      new ServerMetrics(stats),
    )) as Completion;
    expect(out.choices.map((c) => [c.index, c.text, c.finish_reason])).toEqual([
      [0, 'p0a', 'length'],
      [1, 'p0b', 'stop'],
      [2, 'p1d', 'length'],
      [3, 'p1c', 'length'],
    ]);
    expect(out.choices[0]!.logprobs!.text_offset).toEqual([0, 2]);
    expect(out.usage).toEqual({
      prompt_tokens: 6,
      completion_tokens: 5,
      total_tokens: 11,
      prompt_tokens_details: { cached_tokens: 2 },
    });
  });

  it('answers chat with assistant messages, and fails the batch when one prompt fails', async () => {
    const chat = await collectResponse(
      prepared({ kind: 'chat', requests: [request('chatcmpl-1', 1)] }),
      [events([delta(0, 'hi', { finishReason: 'stop' }), usage(1)])],
      new AbortController(),
      0,
      new ServerMetrics(stats),
    );
    expect(chat).toMatchObject({
      object: 'chat.completion',
      choices: [{ index: 0, message: { role: 'assistant', content: 'hi' }, finish_reason: 'stop' }],
    });
    const controller = new AbortController();
    const failure = new EngineError('INTERNAL', 'boom');
    await expect(
      collectResponse(
        prepared({}),
        [events([delta(0, 'a')], failure), events([delta(0, 'b')])],
        controller,
        0,
        new ServerMetrics(stats),
      ),
    ).rejects.toBe(failure);
    expect(controller.signal.reason).toBe(failure);
  });
});
