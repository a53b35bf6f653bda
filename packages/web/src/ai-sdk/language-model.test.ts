// The provider's mapping, over a fake engine that records what it was asked and answers
// OpenAI-shaped chunks: call options to the request, chunks to the spec's stream parts, usage
// with cached tokens, finish reasons, abort, cancel, and what it refuses.
import type { LanguageModelV3StreamPart } from '@ai-sdk/provider';
import { generateText, jsonSchema, Output, streamText } from 'ai';
import { describe, expect, it } from 'vitest';
import { kvasir } from '../ai-sdk.js';
import type {
  ChatCompletion,
  ChatCompletionChunk,
  ChatCompletionRequest,
  RequestOptions,
  Usage,
} from '../create-engine.js';
import type { KvasirChatEngine } from './language-model.js';

const USAGE: Usage = {
  prompt_tokens: 40,
  completion_tokens: 3,
  total_tokens: 43,
  prompt_tokens_details: { cached_tokens: 32 },
};

interface Fake {
  engine: KvasirChatEngine;
  bodies: ChatCompletionRequest[];
  /** The request's iterator was ended early (its blocks would come back). */
  returned: () => boolean;
}

/** An engine answering `pieces` then `finish`; `fail` throws after the pieces instead. */
function fakeEngine(
  pieces: readonly string[],
  finish: 'stop' | 'length' = 'stop',
  fail?: Error,
): Fake {
  const bodies: ChatCompletionRequest[] = [];
  let returned = false;
  const meta = { id: 'chatcmpl-7', created: 1_700_000_000, model: 'mini' };
  const chunk = (
    content: string | undefined,
    reason: 'stop' | 'length' | null,
    usage: Usage | null = null,
  ): ChatCompletionChunk => ({
    ...meta,
    object: 'chat.completion.chunk',
    choices:
      content === undefined && reason === null
        ? []
        : [{ index: 0, delta: { content: content ?? '' }, finish_reason: reason, logprobs: null }],
    usage,
  });
  async function* stream(signal: AbortSignal | undefined): AsyncGenerator<ChatCompletionChunk> {
    try {
      for (const [i, p] of pieces.entries()) {
        await new Promise((r) => setTimeout(r, 1));
        if (signal?.aborted) throw new DOMException('the request was aborted', 'AbortError');
        yield chunk(p, i === pieces.length - 1 && !fail ? finish : null);
      }
      if (fail) throw fail;
      yield chunk(undefined, null, USAGE);
    } finally {
      returned = true;
    }
  }
  const create = async (body: ChatCompletionRequest, options?: RequestOptions) => {
    bodies.push(body);
    if (body.stream) return stream(options?.signal);
    return {
      ...meta,
      object: 'chat.completion',
      choices: [
        {
          index: 0,
          message: { role: 'assistant', content: pieces.join('') },
          finish_reason: finish,
          logprobs: null,
        },
      ],
      usage: USAGE,
    } satisfies ChatCompletion;
  };
  const engine = {
    model: { id: 'mini' },
    chat: { completions: { create } },
  } as unknown as KvasirChatEngine;
  return { engine, bodies, returned: () => returned && bodies.some((b) => b.stream) };
}

async function readAll<T>(stream: ReadableStream<T>): Promise<T[]> {
  const parts: T[] = [];
  const reader = stream.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return parts;
    parts.push(value);
  }
}

describe('kvasir(engine) as an AI SDK LanguageModelV3', () => {
  it('maps the call options and prompt to the chat request', async () => {
    const fake = fakeEngine(['ok']);
    await generateText({
      model: kvasir(fake.engine, { min_p: 0.05, ignore_eos: true }),
      system: 'Be brief.',
      messages: [
        { role: 'user', content: 'Hi' },
        { role: 'assistant', content: [{ type: 'text', text: 'Hello.' }] },
        {
          role: 'user',
          content: [
            { type: 'text', text: 'Again ' },
            { type: 'text', text: 'please' },
          ],
        },
      ],
      maxOutputTokens: 12,
      temperature: 0,
      topP: 0.9,
      topK: 20,
      presencePenalty: 0.5,
      frequencyPenalty: 0.25,
      seed: 7,
      stopSequences: ['END'],
      providerOptions: { kvasir: { ignore_eos: false, repetition_penalty: 1.1 } },
    });
    expect(fake.bodies[0]).toEqual({
      messages: [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'Hi' },
        { role: 'assistant', content: 'Hello.' },
        { role: 'user', content: 'Again please' },
      ],
      max_tokens: 12,
      temperature: 0,
      top_p: 0.9,
      top_k: 20,
      presence_penalty: 0.5,
      frequency_penalty: 0.25,
      seed: 7,
      stop: ['END'],
      min_p: 0.05,
      ignore_eos: false,
      repetition_penalty: 1.1,
      stream: false,
    });
  });

  it('generateText: the text, finish reason and usage with the prefix cache as cache reads', async () => {
    const fake = fakeEngine(['Paged ', 'attention'], 'length');
    const result = await generateText({ model: kvasir(fake.engine), prompt: 'Explain' });
    expect(result.text).toBe('Paged attention');
    expect(result.finishReason).toBe('length');
    expect(result.usage.inputTokens).toBe(40);
    expect(result.usage.inputTokenDetails).toMatchObject({ cacheReadTokens: 32, noCacheTokens: 8 });
    expect(result.usage.outputTokens).toBe(3);
    expect(result.response.id).toBe('chatcmpl-7');
    expect(result.response.modelId).toBe('mini');
  });

  it('doStream: exactly the spec parts, in order, with usage and finish reason', async () => {
    const fake = fakeEngine(['a', 'b', 'c'], 'stop');
    const { stream } = await kvasir(fake.engine).doStream({
      prompt: [{ role: 'user', content: [{ type: 'text', text: 'x' }] }],
    });
    const parts = await readAll(stream);
    expect(parts.map((p) => p.type)).toEqual([
      'stream-start',
      'response-metadata',
      'text-start',
      'text-delta',
      'text-delta',
      'text-delta',
      'text-end',
      'finish',
    ]);
    expect(parts[1]).toEqual({
      type: 'response-metadata',
      id: 'chatcmpl-7',
      modelId: 'mini',
      timestamp: new Date(1_700_000_000_000),
    });
    const deltas = parts.filter((p) => p.type === 'text-delta');
    expect(deltas.map((p) => p.delta).join('')).toBe('abc');
    expect(
      new Set(
        parts
          .filter((p) => 'id' in p && p.type.startsWith('text'))
          .map((p) => (p as { id: string }).id),
      ).size,
    ).toBe(1);
    const finish = parts.at(-1) as Extract<LanguageModelV3StreamPart, { type: 'finish' }>;
    expect(finish.finishReason).toEqual({ unified: 'stop', raw: 'stop' });
    expect(finish.usage.inputTokens).toEqual({
      total: 40,
      noCache: 8,
      cacheRead: 32,
      cacheWrite: undefined,
    });
    expect(finish.usage.outputTokens).toEqual({ total: 3, text: 3, reasoning: undefined });
    expect(fake.bodies[0]).toMatchObject({ stream: true, stream_options: { include_usage: true } });
  });

  it('streamText: the text stream and the final usage', async () => {
    const fake = fakeEngine(['one ', 'two ', 'three'], 'length');
    const result = streamText({ model: kvasir(fake.engine), prompt: 'count' });
    let text = '';
    for await (const t of result.textStream) text += t;
    expect(text).toBe('one two three');
    expect(await result.finishReason).toBe('length');
    expect((await result.usage).inputTokenDetails.cacheReadTokens).toBe(32);
  });

  it('an engine error mid-stream is an error part and finish reason error', async () => {
    const fake = fakeEngine(['a'], 'stop', new Error('device lost'));
    const { stream } = await kvasir(fake.engine).doStream({
      prompt: [{ role: 'user', content: [{ type: 'text', text: 'x' }] }],
    });
    const parts = await readAll(stream);
    expect(parts.map((p) => p.type)).toEqual([
      'stream-start',
      'response-metadata',
      'text-start',
      'text-delta',
      'text-end',
      'error',
      'finish',
    ]);
    expect((parts[5] as { error: Error }).error.message).toBe('device lost');
    expect((parts[6] as { finishReason: unknown }).finishReason).toEqual({
      unified: 'error',
      raw: undefined,
    });
  });

  it('an abort errors the stream with AbortError; a cancelled stream ends the request', async () => {
    const aborted = fakeEngine(['a', 'b', 'c', 'd']);
    const controller = new AbortController();
    const { stream } = await kvasir(aborted.engine).doStream({
      prompt: [{ role: 'user', content: [{ type: 'text', text: 'x' }] }],
      abortSignal: controller.signal,
    });
    const reader = stream.getReader();
    await reader.read();
    await reader.read();
    controller.abort();
    let error: unknown;
    try {
      for (;;) if ((await reader.read()).done) break;
    } catch (e) {
      error = e;
    }
    expect((error as Error).name).toBe('AbortError');

    const cancelled = fakeEngine(['a', 'b', 'c', 'd']);
    const r = (
      await kvasir(cancelled.engine).doStream({
        prompt: [{ role: 'user', content: [{ type: 'text', text: 'x' }] }],
      })
    ).stream.getReader();
    await r.read();
    await r.read();
    expect(cancelled.returned()).toBe(false);
    await r.cancel();
    expect(cancelled.returned()).toBe(true);
  });

  it('structured output: Output.object asks the engine for a JSON schema and parses the answer', async () => {
    const fake = fakeEngine(['{"ok":', ' true}']);
    const schema = {
      type: 'object' as const,
      properties: { ok: { type: 'boolean' as const } },
      required: ['ok'],
      additionalProperties: false,
    };
    const result = await generateText({
      model: kvasir(fake.engine),
      prompt: 'Is it?',
      output: Output.object({ schema: jsonSchema<{ ok: boolean }>(schema) }),
    });
    expect(result.output).toEqual({ ok: true });
    expect(fake.bodies[0]!.response_format).toEqual({
      type: 'json_schema',
      json_schema: { name: 'response', schema },
    });
  });

  it("maps function tools, the tool choice and the prompt's tool turns to OpenAI's fields", async () => {
    const fake = fakeEngine(['ok']);
    const inputSchema = {
      type: 'object' as const,
      properties: { city: { type: 'string' as const } },
    };
    await kvasir(fake.engine).doGenerate({
      prompt: [
        { role: 'user', content: [{ type: 'text', text: 'Weather in Oslo?' }] },
        {
          role: 'assistant',
          content: [
            { type: 'reasoning', text: 'hm' },
            {
              type: 'tool-call',
              toolCallId: 'call_1',
              toolName: 'weather',
              input: { city: 'Oslo' },
            },
          ],
        },
        {
          role: 'tool',
          content: [
            {
              type: 'tool-result',
              toolCallId: 'call_1',
              toolName: 'weather',
              output: { type: 'json', value: { temp: 21 } },
            },
          ],
        },
      ],
      tools: [{ type: 'function', name: 'weather', description: 'Weather', inputSchema }],
      toolChoice: { type: 'tool', toolName: 'weather' },
    });
    expect(fake.bodies[0]).toMatchObject({
      messages: [
        { role: 'user', content: 'Weather in Oslo?' },
        {
          role: 'assistant',
          content: null,
          tool_calls: [
            {
              id: 'call_1',
              type: 'function',
              function: { name: 'weather', arguments: '{"city":"Oslo"}' },
            },
          ],
        },
        { role: 'tool', tool_call_id: 'call_1', content: '{"temp":21}' },
      ],
      tools: [
        {
          type: 'function',
          function: { name: 'weather', description: 'Weather', parameters: inputSchema },
        },
      ],
      tool_choice: { type: 'function', function: { name: 'weather' } },
    });
    for (const type of ['auto', 'none', 'required'] as const) {
      await kvasir(fake.engine).doGenerate({
        prompt: [{ role: 'user', content: [{ type: 'text', text: 'x' }] }],
        tools: [{ type: 'function', name: 'weather', inputSchema }],
        toolChoice: { type },
      });
      expect(fake.bodies.at(-1)?.tool_choice).toBe(type);
    }
  });

  it('tool calls: content parts and finish reason tool-calls whole; input parts then tool-call streamed', async () => {
    const meta = { id: 'chatcmpl-8', created: 1_700_000_000, model: 'mini' };
    const call = { id: 'call_abc', type: 'function' as const };
    const chunks: ChatCompletionChunk[] = [
      { index: 0, id: call.id, type: call.type, function: { name: 'weather', arguments: '' } },
      { index: 0, function: { arguments: '{"city": ' } },
      { index: 0, function: { arguments: '"Oslo"}' } },
    ].map((d, i) => ({
      ...meta,
      object: 'chat.completion.chunk',
      choices: [
        {
          index: 0,
          delta: { ...(i === 0 ? { role: 'assistant' as const } : {}), tool_calls: [d] },
          finish_reason: null,
          logprobs: null,
        },
      ],
      usage: null,
    }));
    chunks.push({
      ...meta,
      object: 'chat.completion.chunk',
      choices: [{ index: 0, delta: {}, finish_reason: 'tool_calls', logprobs: null }],
      usage: null,
    });
    const engine = {
      model: { id: 'mini' },
      chat: {
        completions: {
          create: async (body: ChatCompletionRequest) =>
            body.stream
              ? (async function* () {
                  yield* chunks;
                })()
              : ({
                  ...meta,
                  object: 'chat.completion',
                  choices: [
                    {
                      index: 0,
                      message: {
                        role: 'assistant',
                        content: null,
                        tool_calls: [
                          { ...call, function: { name: 'weather', arguments: '{"city": "Oslo"}' } },
                        ],
                      },
                      finish_reason: 'tool_calls',
                      logprobs: null,
                    },
                  ],
                  usage: USAGE,
                } satisfies ChatCompletion),
        },
      },
    } as unknown as KvasirChatEngine;
    const options = {
      prompt: [{ role: 'user' as const, content: [{ type: 'text' as const, text: 'x' }] }],
    };
    const whole = await kvasir(engine).doGenerate(options);
    expect(whole.content).toEqual([
      { type: 'tool-call', toolCallId: 'call_abc', toolName: 'weather', input: '{"city": "Oslo"}' },
    ]);
    expect(whole.finishReason).toEqual({ unified: 'tool-calls', raw: 'tool_calls' });
    const parts = await readAll((await kvasir(engine).doStream(options)).stream);
    expect(parts.slice(2)).toEqual([
      { type: 'tool-input-start', id: 'call_abc', toolName: 'weather' },
      { type: 'tool-input-delta', id: 'call_abc', delta: '{"city": ' },
      { type: 'tool-input-delta', id: 'call_abc', delta: '"Oslo"}' },
      { type: 'tool-input-end', id: 'call_abc' },
      { type: 'tool-call', toolCallId: 'call_abc', toolName: 'weather', input: '{"city": "Oslo"}' },
      expect.objectContaining({
        type: 'finish',
        finishReason: { unified: 'tool-calls', raw: 'tool_calls' },
      }),
    ]);
  });

  it('refuses provider-defined tools and files with UnsupportedFunctionalityError', async () => {
    const model = kvasir(fakeEngine(['x']).engine);
    const user = { role: 'user' as const, content: [{ type: 'text' as const, text: 'x' }] };
    const refusal = (options: Parameters<typeof model.doGenerate>[0]) =>
      model.doGenerate(options).then(
        () => 'accepted',
        (e: Error & { functionality?: string }) => `${e.name}: ${e.functionality}`,
      );
    expect(
      await refusal({
        prompt: [user],
        tools: [{ type: 'provider', id: 'openai.web_search', name: 'web_search', args: {} }],
      }),
    ).toMatch(/^AI_UnsupportedFunctionalityError: provider-defined tools \(openai.web_search\)/);
    expect(
      await refusal({
        prompt: [user],
        tools: [{ type: 'function', name: 'f', inputSchema: { type: 'object' } }],
        toolChoice: { type: 'none' },
      }),
    ).toBe('accepted');
    expect(
      await refusal({
        prompt: [
          { role: 'user', content: [{ type: 'file', mediaType: 'image/png', data: 'AAAA' }] },
        ],
      }),
    ).toMatch(/file parts \(image\/png\)/);
    // Headers have no HTTP request to go to: no warning (the AI SDK always sends a user-agent).
    const { warnings } = await model.doGenerate({ prompt: [user], headers: { 'x-a': '1' } });
    expect(warnings).toEqual([]);
  });
});
