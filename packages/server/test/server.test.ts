import OpenAI from 'openai';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createServer, type KvasirServer } from '../src/server.js';
import {
  CACHED_TOKENS,
  MAX_MODEL_LEN,
  MODEL_ID,
  PIECE,
  promptLogprob,
  renderChat,
  ScriptedEngine,
  scriptPieces,
  scriptText,
} from './scripted-engine.js';

interface Harness {
  engine: ScriptedEngine;
  server: KvasirServer;
  url: string;
  client: OpenAI;
}

const started: Harness[] = [];

async function start(options: { apiKey?: string; bodyLimitBytes?: number } = {}): Promise<Harness> {
  const engine = new ScriptedEngine();
  const server = createServer({ engine, port: 0, ...options });
  const url = await server.listen();
  const client = new OpenAI({
    baseURL: `${url}/v1`,
    apiKey: options.apiKey ?? 'unused',
    maxRetries: 0,
  });
  const h = { engine, server, url, client };
  started.push(h);
  return h;
}

afterAll(async () => {
  await Promise.all(started.map((h) => h.server.close(0)));
});

async function expectApiError(promise: Promise<unknown>) {
  try {
    await promise;
  } catch (error) {
    expect(error).toBeInstanceOf(OpenAI.APIError);
    return error as InstanceType<typeof OpenAI.APIError>;
  }
  throw new Error('expected the request to fail');
}

describe('OpenAI-compatible server (official client, real socket)', () => {
  let h: Harness;
  beforeAll(async () => {
    h = await start();
  });
  afterEach(() => {
    h.engine.queueFull = false;
    h.engine.health_ = { status: 'ok' };
  });

  it('binds loopback and lists the engine models', async () => {
    expect(new URL(h.url).hostname).toBe('127.0.0.1');
    const models = await h.client.models.list();
    expect(models.data.map((m) => m.id)).toEqual([MODEL_ID]);
    const one = await h.client.models.retrieve(MODEL_ID);
    expect(one.owned_by).toBe('kvasir-tests');
  });

  it('completes a prompt with usage including cached prompt tokens', async () => {
    const prompt = 'Once upon a time';
    const res = await h.client.completions.create({ model: MODEL_ID, prompt, max_tokens: 5 });
    expect(res.object).toBe('text_completion');
    expect(res.choices).toHaveLength(1);
    expect(res.choices[0]!.text).toBe(scriptText(0, undefined).slice(0, 5 * PIECE));
    expect(res.choices[0]!.finish_reason).toBe('length');
    expect(res.usage).toMatchObject({
      prompt_tokens: prompt.length,
      completion_tokens: 5,
      total_tokens: prompt.length + 5,
    });
    expect(
      (res.usage as unknown as { prompt_tokens_details: { cached_tokens: number } })
        .prompt_tokens_details.cached_tokens,
    ).toBe(CACHED_TOKENS);
    const sent = h.engine.requests.at(-1)!;
    expect(sent.promptTokens).toEqual(Array.from(prompt, (c) => c.codePointAt(0)));
  });

  it('accepts a prompt given as token ids', async () => {
    const res = await h.client.completions.create({
      model: MODEL_ID,
      prompt: [5, 6, 7],
      max_tokens: 2,
    });
    expect(res.usage?.prompt_tokens).toBe(3);
    expect(h.engine.requests.at(-1)!.promptTokens).toEqual([5, 6, 7]);
  });

  it('echoes the prompt with its log-probabilities, scoring only with max_tokens 0', async () => {
    const prompt = 'The cat sat';
    const res = await h.client.completions.create({
      model: MODEL_ID,
      prompt,
      max_tokens: 0,
      echo: true,
      logprobs: 1,
      temperature: 0,
    });
    const choice = res.choices[0]!;
    expect(choice.text).toBe(prompt);
    expect(choice.finish_reason).toBe('length');
    expect(res.usage?.completion_tokens).toBe(0);
    const lp = choice.logprobs!;
    expect(lp.tokens).toEqual(Array.from(prompt));
    expect(lp.token_logprobs).toEqual(
      Array.from(prompt, (_, i) => (i === 0 ? null : promptLogprob(i))),
    );
    expect(lp.top_logprobs![0]).toBeNull();
    expect(lp.top_logprobs![3]).toEqual({ [prompt[3]!]: promptLogprob(3) });
    expect(lp.text_offset).toEqual(Array.from(prompt, (_, i) => i));
    const sent = h.engine.requests.at(-1)!;
    expect(sent.echo).toBe(true);
    expect(sent.maxTokens).toBe(0);
  });

  it('echo puts the prompt before the generated text and shifts their offsets past it', async () => {
    const prompt = 'Hello';
    const res = await h.client.completions.create({
      model: MODEL_ID,
      prompt,
      max_tokens: 2,
      echo: true,
      logprobs: 0,
    });
    const choice = res.choices[0]!;
    expect(choice.text).toBe(prompt + scriptText(0, undefined).slice(0, 2 * PIECE));
    const lp = choice.logprobs!;
    expect(lp.tokens).toHaveLength(prompt.length + 2);
    expect(lp.token_logprobs!.slice(prompt.length)).toEqual([-0.5, -0.5]);
    expect(lp.text_offset!.slice(prompt.length)).toEqual([prompt.length, prompt.length + PIECE]);
    expect(lp.top_logprobs).toBeNull();

    const plain = await h.client.completions.create({
      model: MODEL_ID,
      prompt: [72, 105],
      max_tokens: 1,
      echo: true,
    });
    expect(plain.choices[0]!.text).toBe(`Hi${scriptText(0, undefined).slice(0, PIECE)}`);
    expect(plain.choices[0]!.logprobs).toBeNull();
  });

  it('takes a batch of prompts as lm-evaluation-harness sends it, one choice per prompt and n', async () => {
    const prompts = [
      [72, 105, 33],
      [65, 66],
      [120, 121, 122, 123],
    ];
    const raw = await fetch(`${h.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model: MODEL_ID,
        prompt: prompts,
        max_tokens: 1,
        temperature: 0,
        logprobs: 1,
        echo: true,
        seed: 1234,
      }),
    });
    expect(raw.status).toBe(200);
    const body = (await raw.json()) as {
      choices: {
        index: number;
        text: string;
        logprobs: { tokens: string[]; token_logprobs: (number | null)[] };
      }[];
      usage: { prompt_tokens: number; completion_tokens: number };
    };
    expect(body.choices.map((c) => c.index)).toEqual([0, 1, 2]);
    body.choices.forEach((c, p) => {
      const text = String.fromCodePoint(...prompts[p]!);
      expect(c.text).toBe(text + scriptText(0, 1234).slice(0, PIECE));
      expect(c.logprobs.token_logprobs).toHaveLength(prompts[p]!.length + 1);
      expect(c.logprobs.token_logprobs[0]).toBeNull();
      expect(c.logprobs.token_logprobs[1]).toBe(promptLogprob(1));
    });
    expect(body.usage.prompt_tokens).toBe(9);
    expect(body.usage.completion_tokens).toBe(3);
    expect(new Set(h.engine.requests.slice(-3).map((r) => r.id)).size).toBe(3);

    const twice = await h.client.completions.create({
      model: MODEL_ID,
      prompt: ['ab', 'cd'],
      n: 2,
      max_tokens: 1,
      echo: true,
    });
    expect(twice.choices.map((c) => [c.index, c.text.slice(0, 2)])).toEqual([
      [0, 'ab'],
      [1, 'ab'],
      [2, 'cd'],
      [3, 'cd'],
    ]);
  });

  it('passes kv_compression to the engine, which may then run past the context', async () => {
    const long = 'x'.repeat(MAX_MODEL_LEN + 10);
    // Without compression a prompt filling the context is refused by the server itself.
    const refused = await expectApiError(
      h.client.completions.create({ model: MODEL_ID, prompt: long, max_tokens: 1 }),
    );
    expect(refused.status).toBe(413);
    expect(refused.param).toBe('prompt');
    const kv = { policy: 'sinks', sinks: 4, window: 60 };
    const res = await h.client.completions.create({
      model: MODEL_ID,
      prompt: long,
      max_tokens: 2 * MAX_MODEL_LEN,
      kv_compression: kv,
    } as OpenAI.CompletionCreateParamsNonStreaming & { kv_compression: unknown });
    expect(res.choices).toHaveLength(1);
    const seen = h.engine.requests.at(-1)!;
    expect(seen.kvCompression).toEqual(kv);
    expect(seen.maxTokens).toBe(2 * MAX_MODEL_LEN);
    expect(seen.promptTokens.length).toBe(MAX_MODEL_LEN + 10);
    // Original positions cannot outrun the context: the usual limits apply.
    const original = await expectApiError(
      h.client.completions.create({
        model: MODEL_ID,
        prompt: 'q',
        max_tokens: 2 * MAX_MODEL_LEN,
        kv_compression: { ...kv, positions: 'original' },
      } as OpenAI.CompletionCreateParamsNonStreaming & { kv_compression: unknown }),
    );
    expect(original.status).toBe(400);
    expect(original.param).toBe('max_tokens');
  });

  it('refuses a malformed kv_compression, naming the field', async () => {
    for (const bad of [{ sinks: 4 }, { policy: '' }, { policy: 'sinks', window: [1] }, 'sinks']) {
      const error = await expectApiError(
        h.client.completions.create({
          model: MODEL_ID,
          prompt: 'q',
          max_tokens: 1,
          kv_compression: bad,
        } as OpenAI.CompletionCreateParamsNonStreaming & { kv_compression: unknown }),
      );
      expect(error.status).toBe(400);
      expect(String(error.param)).toMatch(/^kv_compression/);
    }
  });

  it('refuses echo with stream, a streamed batch and max_tokens 0 without echo, naming the field', async () => {
    const streamed = await expectApiError(
      h.client.completions.create({ model: MODEL_ID, prompt: 'x', echo: true, stream: true }),
    );
    expect(streamed.status).toBe(400);
    expect(streamed.param).toBe('echo');
    const batch = await expectApiError(
      h.client.completions.create({ model: MODEL_ID, prompt: ['x', 'y'], stream: true }),
    );
    expect(batch.param).toBe('prompt');
    const zero = await expectApiError(
      h.client.completions.create({ model: MODEL_ID, prompt: 'x', max_tokens: 0 }),
    );
    expect(zero.param).toBe('max_tokens');
    const badOne = await expectApiError(
      h.client.completions.create({ model: MODEL_ID, prompt: ['x', ''], max_tokens: 1 }),
    );
    expect(badOne.param).toBe('prompt[1]');
  });

  it('applies the chat template and answers as the assistant', async () => {
    const messages = [
      { role: 'system' as const, content: 'Be brief.' },
      { role: 'user' as const, content: 'Hello?' },
    ];
    const res = await h.client.chat.completions.create({
      model: MODEL_ID,
      messages,
      max_tokens: 4,
    });
    expect(res.object).toBe('chat.completion');
    expect(res.choices[0]!.message.role).toBe('assistant');
    expect(res.choices[0]!.message.content).toBe(scriptText(0, undefined).slice(0, 4 * PIECE));
    expect(res.usage?.prompt_tokens).toBe(renderChat(messages).length);
    expect(res.usage?.completion_tokens).toBe(4);
  });

  it('prefers max_completion_tokens and passes sampling parameters and the seed through', async () => {
    await h.client.chat.completions.create({
      model: MODEL_ID,
      messages: [{ role: 'user', content: 'x' }],
      max_completion_tokens: 3,
      max_tokens: 9,
      temperature: 0.7,
      top_p: 0.9,
      presence_penalty: 0.5,
      frequency_penalty: -0.25,
      seed: 1234,
      // vLLM-style extensions the official client forwards as extra body fields.
      ...({ top_k: 40, min_p: 0.05, repetition_penalty: 1.1 } as object),
    });
    const sent = h.engine.requests.at(-1)!;
    expect(sent.maxTokens).toBe(3);
    expect(sent.sampling).toEqual({
      temperature: 0.7,
      topP: 0.9,
      topK: 40,
      minP: 0.05,
      presencePenalty: 0.5,
      frequencyPenalty: -0.25,
      repetitionPenalty: 1.1,
      seed: 1234,
    });
    const res = await h.client.completions.create({
      model: MODEL_ID,
      prompt: 'p',
      max_tokens: 8,
      seed: 99,
    });
    expect(res.choices[0]!.text.startsWith('choice 0 seed 99')).toBe(true);
  });

  it('streams completions; the chunks add up to the non-streamed text', async () => {
    const stream = await h.client.completions.create({
      model: MODEL_ID,
      prompt: 'stream me',
      max_tokens: 7,
      stream: true,
    });
    let text = '';
    const finishes: Array<string | null> = [];
    for await (const chunk of stream) {
      expect(chunk.object).toBe('text_completion');
      text += chunk.choices[0]?.text ?? '';
      finishes.push(chunk.choices[0]?.finish_reason ?? null);
    }
    expect(text).toBe(scriptText(0, undefined).slice(0, 7 * PIECE));
    expect(finishes.at(-1)).toBe('length');
    expect(finishes.slice(0, -1).every((f) => f === null)).toBe(true);
  });

  it('streams chat with include_usage, ending in a usage-only chunk and [DONE]', async () => {
    const res = await fetch(`${h.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model: MODEL_ID,
        messages: [{ role: 'user', content: 'hi' }],
        max_tokens: 3,
        stream: true,
        stream_options: { include_usage: true },
      }),
    });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toContain('text/event-stream');
    const events = (await res.text())
      .split('\n\n')
      .filter((e) => e.startsWith('data: '))
      .map((e) => e.slice(6));
    expect(events.at(-1)).toBe('[DONE]');
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e));
    expect(chunks[0].choices[0].delta).toEqual({ role: 'assistant', content: '' });
    const last = chunks.at(-1);
    expect(last.choices).toEqual([]);
    expect(last.usage.completion_tokens).toBe(3);
    expect(last.usage.prompt_tokens_details.cached_tokens).toBe(CACHED_TOKENS);
    for (const c of chunks.slice(0, -1)) expect(c.usage).toBeNull();
    const content = chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('');
    expect(content).toBe(scriptText(0, undefined).slice(0, 3 * PIECE));
  });

  it('returns n = 2 independent choices, streamed and not', async () => {
    const res = await h.client.completions.create({
      model: MODEL_ID,
      prompt: 'n',
      n: 2,
      max_tokens: 6,
      seed: 3,
    });
    expect(res.choices.map((c) => c.index)).toEqual([0, 1]);
    for (const c of res.choices) expect(c.text).toBe(scriptText(c.index, 3).slice(0, 6 * PIECE));
    expect(res.usage?.completion_tokens).toBe(12);
    expect(res.usage?.prompt_tokens).toBe(1);

    const stream = await h.client.chat.completions.create({
      model: MODEL_ID,
      messages: [{ role: 'user', content: 'n' }],
      n: 2,
      max_tokens: 5,
      seed: 8,
      stream: true,
    });
    const texts = ['', ''];
    const finish: Array<string | null> = [null, null];
    for await (const chunk of stream) {
      for (const c of chunk.choices) {
        texts[c.index] += c.delta.content ?? '';
        if (c.finish_reason) finish[c.index] = c.finish_reason;
      }
    }
    expect(texts).toEqual([scriptText(0, 8).slice(0, 15), scriptText(1, 8).slice(0, 15)]);
    expect(finish).toEqual(['length', 'length']);
  });

  it('applies stop strings across token boundaries without emitting them', async () => {
    const full = scriptText(0, 5);
    const at = full.indexOf('STOP');
    // The stop string must really straddle pieces for this test to mean anything.
    expect(Math.floor(at / PIECE)).not.toBe(Math.floor((at + 3) / PIECE));
    const res = await h.client.completions.create({
      model: MODEL_ID,
      prompt: 'q',
      max_tokens: 100,
      seed: 5,
      stop: ['STOP', 'never-appears'],
    });
    expect(res.choices[0]!.text).toBe(full.slice(0, at));
    expect(res.choices[0]!.finish_reason).toBe('stop');
    expect(h.engine.requests.at(-1)!.stopStrings).toEqual(['STOP', 'never-appears']);
    // Tokens up to the one completing the stop string were generated and are billed.
    expect(res.usage?.completion_tokens).toBe(Math.floor((at + 3) / PIECE) + 1);

    const stream = await h.client.chat.completions.create({
      model: MODEL_ID,
      messages: [{ role: 'user', content: 'q' }],
      max_tokens: 100,
      seed: 5,
      stop: 'STOP',
      stream: true,
    });
    let text = '';
    let reason: string | null = null;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta.content ?? '';
      reason = chunk.choices[0]?.finish_reason ?? reason;
    }
    expect(text).toBe(full.slice(0, at));
    expect(reason).toBe('stop');
  });

  it('returns completion logprobs aligned with the text, trimmed at a stop string', async () => {
    const res = await h.client.completions.create({
      model: MODEL_ID,
      prompt: 'lp',
      max_tokens: 4,
      logprobs: 2,
    });
    const lp = res.choices[0]!.logprobs!;
    expect(lp.tokens).toEqual(scriptPieces(0, undefined).slice(0, 4));
    expect(lp.token_logprobs).toEqual([-0.5, -0.5, -0.5, -0.5]);
    expect(lp.top_logprobs?.[0]).toEqual({ alt0: -1, alt1: -2 });
    expect(lp.text_offset).toEqual([0, 3, 6, 9]);

    const stopped = await h.client.completions.create({
      model: MODEL_ID,
      prompt: 'lp',
      max_tokens: 100,
      logprobs: 0,
      stop: 'STOP',
    });
    const text = stopped.choices[0]!.text;
    const tokens = stopped.choices[0]!.logprobs!.tokens!;
    // Every token that contributed text before the stop is present, and none after it.
    expect(tokens.join('').startsWith(text)).toBe(true);
    expect(tokens.slice(0, -1).join('').length).toBeLessThan(text.length);
    expect(stopped.choices[0]!.logprobs!.top_logprobs).toBeNull();
  });

  it('returns chat logprobs with top alternatives and bytes', async () => {
    const res = await h.client.chat.completions.create({
      model: MODEL_ID,
      messages: [{ role: 'user', content: 'x' }],
      max_tokens: 2,
      logprobs: true,
      top_logprobs: 3,
    });
    const content = res.choices[0]!.logprobs!.content!;
    expect(content.map((c) => c.token)).toEqual(scriptPieces(0, undefined).slice(0, 2));
    expect(content[0]!.top_logprobs.map((t) => t.token)).toEqual(['alt0', 'alt1', 'alt2']);
    expect(content[0]!.bytes).toEqual(Array.from(Buffer.from(content[0]!.token)));
    expect(h.engine.requests.at(-1)!.logprobs).toBe(3);
  });

  it('answers invalid parameters with 400 naming the field', async () => {
    const bad = await expectApiError(
      h.client.completions.create({ model: MODEL_ID, prompt: 'x', temperature: 7 }),
    );
    expect(bad.status).toBe(400);
    expect(bad.message).toContain('temperature');
    expect(bad.param).toBe('temperature');
    expect(bad.type).toBe('invalid_request_error');

    const noMessages = await expectApiError(
      h.client.chat.completions.create({ model: MODEL_ID, messages: [] }),
    );
    expect(noMessages.status).toBe(400);
    expect(noMessages.param).toBe('messages');

    const role = await expectApiError(
      h.client.chat.completions.create({
        model: MODEL_ID,
        messages: [{ role: 'wizard', content: 'x' } as never],
      }),
    );
    expect(role.param).toBe('messages[0].role');

    const tooMany = await expectApiError(
      h.client.completions.create({ model: MODEL_ID, prompt: 'x', max_tokens: MAX_MODEL_LEN }),
    );
    expect(tooMany.status).toBe(400);
    expect(tooMany.param).toBe('max_tokens');

    const tools = await expectApiError(
      h.client.chat.completions.create({
        model: MODEL_ID,
        messages: [{ role: 'user', content: 'x' }],
        tools: [{ type: 'function', function: { name: 'f' } }],
      }),
    );
    expect(tools.status).toBe(400);
    expect(tools.param).toBe('tools');

    // An engine that does not declare structured outputs never gets them, so never ignores them.
    const format = await expectApiError(
      h.client.chat.completions.create({
        model: MODEL_ID,
        messages: [{ role: 'user', content: 'x' }],
        response_format: { type: 'json_object' },
      }),
    );
    expect(format.status).toBe(400);
    expect(format.param).toBe('response_format');
    expect(format.message).toContain("not supported by this server's engine");
  });

  it('answers malformed JSON and unknown routes in the OpenAI error shape', async () => {
    const res = await fetch(`${h.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{"prompt": ',
    });
    expect(res.status).toBe(400);
    const body = (await res.json()) as { error: Record<string, unknown> };
    expect(body.error).toMatchObject({ type: 'invalid_request_error' });
    expect(Object.keys(body.error).sort()).toEqual(['code', 'message', 'param', 'type']);

    const array = await fetch(`${h.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '[1,2]',
    });
    expect(array.status).toBe(400);

    const missing = await fetch(`${h.url}/v2/nothing`);
    expect(missing.status).toBe(404);
    expect(((await missing.json()) as { error: { code: string } }).error.code).toBe('not_found');
  });

  it('answers an unknown model with 404', async () => {
    const err = await expectApiError(h.client.completions.create({ model: 'nope', prompt: 'x' }));
    expect(err.status).toBe(404);
    expect(err.code).toBe('model_not_found');
    expect(err.param).toBe('model');
  });

  it('answers a prompt longer than the context with 413', async () => {
    const err = await expectApiError(
      h.client.completions.create({ model: MODEL_ID, prompt: 'y'.repeat(MAX_MODEL_LEN + 1) }),
    );
    expect(err.status).toBe(413);
    expect(err.code).toBe('context_length_exceeded');
    expect(err.param).toBe('prompt');
  });

  it('answers a full queue with 429 and Retry-After', async () => {
    h.engine.queueFull = true;
    const err = await expectApiError(h.client.completions.create({ model: MODEL_ID, prompt: 'x' }));
    expect(err.status).toBe(429);
    expect(err.headers?.get('retry-after')).toBe('3');
    expect(err.type).toBe('rate_limit_error');
  });

  it('answers 503 while the engine is draining, and reports it on /health', async () => {
    h.engine.health_ = { status: 'draining' };
    const err = await expectApiError(h.client.completions.create({ model: MODEL_ID, prompt: 'x' }));
    expect(err.status).toBe(503);
    const health = await fetch(`${h.url}/health`);
    expect(health.status).toBe(503);
    expect(((await health.json()) as { status: string }).status).toBe('draining');
    h.engine.health_ = { status: 'ok' };
    const ok = await fetch(`${h.url}/health`);
    expect(ok.status).toBe(200);
  });

  it('aborts the engine request when the client disconnects mid-stream', async () => {
    const stream = await h.client.completions.create({
      model: MODEL_ID,
      prompt: 'long',
      max_tokens: 200,
      stream: true,
    });
    const aborted = h.engine.nextAbort();
    let chunks = 0;
    for await (const _chunk of stream) {
      chunks += 1;
      if (chunks === 2) stream.controller.abort();
    }
    const id = await aborted;
    expect(id).toBe(h.engine.requests.at(-1)!.id);
    expect(chunks).toBe(2);
  });

  it('exposes engine gauges, counters and latency histograms in Prometheus format', async () => {
    await h.client.completions.create({ model: MODEL_ID, prompt: 'metrics', max_tokens: 3 });
    const res = await fetch(`${h.url}/metrics`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toContain('text/plain');
    const text = await res.text();
    const value = (series: string) => {
      const line = text.split('\n').find((l) => l.startsWith(`${series} `));
      expect(line, series).toBeDefined();
      return Number(line!.slice(series.length + 1));
    };
    const s = h.engine.stats_;
    expect(value('kvasir_kv_cache_usage_ratio')).toBe(s.kvCacheUsage);
    expect(value('kvasir_kv_blocks{state="used"}')).toBe(s.blocks.used);
    expect(value('kvasir_kv_blocks{state="cached"}')).toBe(s.blocks.cached);
    expect(value('kvasir_kv_blocks{state="free"}')).toBe(s.blocks.free);
    expect(value('kvasir_requests{state="waiting"}')).toBe(s.requests.waiting);
    expect(value('kvasir_requests{state="preempted"}')).toBe(s.requests.preempted);
    expect(value('kvasir_prefix_cache_queries_total')).toBe(s.prefixCache.queries);
    expect(value('kvasir_prefix_cache_hits_total')).toBe(s.prefixCache.hits);
    expect(value('kvasir_preemptions_total{mode="swap"}')).toBe(s.preemptions.swap);
    expect(value('kvasir_offload_hits_total{tier="redis"}')).toBe(s.offloadHits.redis);
    expect(value('kvasir_time_to_first_token_seconds_count')).toBeGreaterThan(0);
    expect(value('kvasir_time_per_output_token_seconds_count')).toBeGreaterThan(0);
    expect(value('kvasir_e2e_request_latency_seconds_count')).toBeGreaterThan(0);
    expect(value('kvasir_prompt_tokens_total')).toBeGreaterThanOrEqual('metrics'.length);
    expect(value('kvasir_generation_tokens_total')).toBeGreaterThanOrEqual(3);
    expect(value('kvasir_request_errors_total{code="queue_full"}')).toBeGreaterThanOrEqual(1);

    // Engine counters are mirrored, not accumulated, across scrapes.
    h.engine.stats_ = { ...s, prefixCache: { queries: 1001, hits: 251 } };
    const again = await (await fetch(`${h.url}/metrics`)).text();
    expect(again).toContain('kvasir_prefix_cache_hits_total 251\n');
  });
});

describe('limits, authentication and shutdown', () => {
  it('requires the API key on /v1 when one is set, but not on /health', async () => {
    const h = await start({ apiKey: 'sk-secret' });
    const ok = await h.client.completions.create({ model: MODEL_ID, prompt: 'x', max_tokens: 1 });
    expect(ok.choices).toHaveLength(1);
    const wrong = new OpenAI({ baseURL: `${h.url}/v1`, apiKey: 'sk-wrong', maxRetries: 0 });
    const err = await expectApiError(wrong.models.list());
    expect(err.status).toBe(401);
    expect(err.type).toBe('authentication_error');
    const bare = await fetch(`${h.url}/v1/models`);
    expect(bare.status).toBe(401);
    expect((await fetch(`${h.url}/health`)).status).toBe(200);
  });

  it('answers a body over the limit with 413', async () => {
    const h = await start({ bodyLimitBytes: 1024 });
    const err = await expectApiError(
      h.client.completions.create({ model: MODEL_ID, prompt: 'z'.repeat(4096) }),
    );
    expect(err.status).toBe(413);
    expect(err.code).toBe('request_too_large');
  });

  it('finishes in-flight work on close while refusing new requests with 503', async () => {
    const h = await start();
    let release!: () => void;
    h.engine.gate = new Promise<void>((r) => {
      release = r;
    });
    const admitted = h.engine.nextAdmitted();
    const pending = h.client.completions.create({ model: MODEL_ID, prompt: 'slow', max_tokens: 4 });
    await admitted;
    const closed = h.server.close(60_000);
    expect(h.server.draining).toBe(true);
    const refused = await expectApiError(
      h.client.completions.create({ model: MODEL_ID, prompt: 'late', max_tokens: 1 }),
    );
    expect(refused.status).toBe(503);
    release();
    const res = await pending;
    expect(res.choices[0]!.text).toBe(scriptText(0, undefined).slice(0, 4 * PIECE));
    await closed;
    expect(h.server.inFlight).toBe(0);
  });

  it('sends stream headers as soon as a request is admitted, before its first token', async () => {
    const h = await start();
    let release!: () => void;
    h.engine.gate = new Promise<void>((r) => {
      release = r;
    });
    const res = await fetch(`${h.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL_ID, prompt: 'x', max_tokens: 2, stream: true }),
    });
    expect(res.status).toBe(200);
    expect(h.engine.requests).toHaveLength(1);
    release();
    expect(await res.text()).toContain('data: [DONE]');
  });

  it('aborts in-flight streams when the shutdown deadline passes', async () => {
    const h = await start();
    let release!: () => void;
    h.engine.gate = new Promise<void>((r) => {
      release = r;
    });
    const admitted = h.engine.nextAdmitted();
    const aborted = h.engine.nextAbort();
    const res = fetch(`${h.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL_ID, prompt: 'x', max_tokens: 50, stream: true }),
    });
    const id = await admitted;
    const closed = h.server.close(0);
    expect(await aborted).toBe(id);
    release();
    const text = await (await res).text();
    expect(text).toContain('"code":"draining"');
    expect(text.trimEnd().endsWith('data: [DONE]')).toBe(true);
    await closed;
  });
});
