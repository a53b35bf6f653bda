import { ModelTokenizer } from '@kvasir/model';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RANDOM_MODEL_NAME } from '../src/default-model.js';
import { CACHE_DIR, eventually, type ServerProcess, startServer } from './harness.js';

let server: ServerProcess;
let tokenizer: ModelTokenizer;

beforeAll(async () => {
  server = await startServer(['--backend', 'cpu', '--max-num-seqs', '8']);
  const dir = /model\s+\S+\s+\((.+)\)/.exec(server.output())![1]!;
  expect(dir.startsWith(CACHE_DIR)).toBe(true);
  tokenizer = await ModelTokenizer.load(dir);
});

afterAll(async () => {
  expect(await server.stop()).toBe(0);
});

const greedy = { model: RANDOM_MODEL_NAME, temperature: 0 } as const;

async function usedBlocks(): Promise<number> {
  return (await server.metrics()).get('kvasir_kv_blocks{state="used"}') ?? -1;
}

describe('kvasir serve (built CLI, --model random, CPU backend)', () => {
  it('prints a banner that says the random model is noise and gives a curl command', () => {
    expect(server.output()).toMatch(/RANDOM weights/);
    expect(server.output()).toMatch(/--model/);
    expect(server.output()).toMatch(/curl http:\/\/127\.0\.0\.1:\d+\/v1\/chat\/completions/);
  });

  it('lists the random model', async () => {
    const models = await server.client.models.list();
    expect(models.data.map((m) => m.id)).toEqual([RANDOM_MODEL_NAME]);
  });

  it('completes a prompt, counting prompt tokens with the model tokenizer', async () => {
    const prompt = 'The paged KV cache';
    const res = await server.client.completions.create({
      ...greedy,
      prompt,
      max_tokens: 12,
      ignore_eos: true,
    } as never);
    const r = res as unknown as OpenAI.Completion;
    expect(r.choices[0]!.finish_reason).toBe('length');
    expect(r.usage!.prompt_tokens).toBe(tokenizer.encode(prompt).length);
    expect(r.usage!.completion_tokens).toBe(12);
    expect(typeof r.choices[0]!.text).toBe('string');
  });

  it('chats through the model chat template', async () => {
    const messages = [{ role: 'user' as const, content: 'Hello there' }];
    const res = await server.client.chat.completions.create({ ...greedy, messages, max_tokens: 8 });
    expect(res.choices[0]!.message.role).toBe('assistant');
    expect(res.usage!.prompt_tokens).toBe(tokenizer.encodeChat(messages).length);
  });

  it('streams exactly the text of the non-streamed greedy answer', async () => {
    const body = { ...greedy, prompt: 'Streaming test prompt', max_tokens: 16, ignore_eos: true };
    const whole = (await server.client.completions.create(
      body as never,
    )) as unknown as OpenAI.Completion;
    const stream = await server.client.completions.create({
      ...body,
      stream: true,
      stream_options: { include_usage: true },
    } as never);
    let text = '';
    let usage: OpenAI.CompletionUsage | undefined;
    for await (const chunk of stream as unknown as AsyncIterable<OpenAI.Completion>) {
      text += chunk.choices[0]?.text ?? '';
      if (chunk.usage) usage = chunk.usage;
    }
    expect(text).toBe(whole.choices[0]!.text);
    expect(usage?.completion_tokens).toBe(16);
  });

  it('returns n = 2 choices with distinct samples, each as long as asked', async () => {
    const res = await server.client.completions.create({
      model: RANDOM_MODEL_NAME,
      prompt: 'Two choices',
      n: 2,
      max_tokens: 10,
      temperature: 1,
      seed: 7,
      ignore_eos: true,
    } as never);
    const r = res as unknown as OpenAI.Completion;
    expect(r.choices.map((c) => c.index).sort()).toEqual([0, 1]);
    expect(r.usage!.completion_tokens).toBe(20);
    expect(r.choices[0]!.text).not.toBe(r.choices[1]!.text);
  });

  it('is deterministic for a seed, and the seed matters', async () => {
    const ask = async (seed: number) =>
      (
        (await server.client.completions.create({
          model: RANDOM_MODEL_NAME,
          prompt: 'Seeded sampling',
          max_tokens: 12,
          temperature: 1,
          seed,
          ignore_eos: true,
        } as never)) as unknown as OpenAI.Completion
      ).choices[0]!.text;
    const a = await ask(11);
    expect(await ask(11)).toBe(a);
    expect(await ask(12)).not.toBe(a);
  });

  it('stops at a stop string that occurs in the greedy answer, without emitting it', async () => {
    const body = {
      ...greedy,
      prompt: 'Stop strings are matched',
      max_tokens: 24,
      ignore_eos: true,
    };
    const full = (
      (await server.client.completions.create(body as never)) as unknown as OpenAI.Completion
    ).choices[0]!.text;
    expect(full.length).toBeGreaterThan(8);
    const stop = full.slice(6, 9);
    const cut = full.indexOf(stop);
    const res = (await server.client.completions.create({
      ...body,
      stop,
    } as never)) as unknown as OpenAI.Completion;
    expect(res.choices[0]!.text).toBe(full.slice(0, cut));
    expect(res.choices[0]!.finish_reason).toBe('stop');
  });

  it('returns log-probabilities of the chosen tokens and their alternatives', async () => {
    const res = (await server.client.completions.create({
      ...greedy,
      prompt: 'Log probabilities',
      max_tokens: 5,
      logprobs: 3,
      ignore_eos: true,
    } as never)) as unknown as OpenAI.Completion;
    const lp = res.choices[0]!.logprobs!;
    expect(lp.token_logprobs).toHaveLength(5);
    for (let i = 0; i < 5; i++) {
      const top = lp.top_logprobs![i]!;
      expect(Object.keys(top).length).toBeGreaterThan(0);
      expect(Object.keys(top).length).toBeLessThanOrEqual(3);
      // Greedy: the chosen token is the most likely one.
      expect(lp.token_logprobs![i]!).toBeCloseTo(Math.max(...Object.values(top)), 5);
      expect(lp.token_logprobs![i]!).toBeLessThanOrEqual(0);
    }
    const chat = await server.client.chat.completions.create({
      ...greedy,
      messages: [{ role: 'user', content: 'hi' }],
      max_tokens: 3,
      logprobs: true,
      top_logprobs: 2,
    });
    const content = chat.choices[0]!.logprobs!.content!;
    expect(content.length).toBe(chat.usage!.completion_tokens);
    for (const c of content) expect(c.top_logprobs.length).toBe(2);
  });

  it('serves a repeated system prompt from the prefix cache', async () => {
    const system = 'You are a careful assistant. '.repeat(12);
    const ask = (q: string) =>
      server.client.chat.completions.create({
        ...greedy,
        messages: [
          { role: 'system', content: system },
          { role: 'user', content: q },
        ],
        max_tokens: 2,
      });
    const before = (await server.metrics()).get('kvasir_prefix_cache_hits_total') ?? 0;
    const first = await ask('first question');
    const second = await ask('second question');
    const cached = (u: unknown) =>
      (u as { prompt_tokens_details: { cached_tokens: number } }).prompt_tokens_details
        .cached_tokens;
    expect(cached(second.usage)).toBeGreaterThanOrEqual(32);
    expect(cached(second.usage)).toBeGreaterThan(cached(first.usage));
    const after = (await server.metrics()).get('kvasir_prefix_cache_hits_total') ?? 0;
    expect(after - before).toBeGreaterThanOrEqual(cached(second.usage));
  });

  it('returns every KV block when a client aborts mid-stream', async () => {
    expect(await eventually(async () => (await usedBlocks()) === 0)).toBe(true);
    const stream = await server.client.completions.create({
      model: RANDOM_MODEL_NAME,
      prompt: 'A long generation that the client abandons',
      max_tokens: 600,
      ignore_eos: true,
      stream: true,
    } as never);
    let chunks = 0;
    for await (const _ of stream as unknown as AsyncIterable<unknown>) {
      chunks++;
      if (chunks === 3) (stream as unknown as { controller: AbortController }).controller.abort();
    }
    expect(chunks).toBeLessThan(600);
    expect(await eventually(async () => (await usedBlocks()) === 0)).toBe(true);
    expect((await server.metrics()).get('kvasir_requests{state="running"}')).toBe(0);
  });

  it('answers bad input with OpenAI errors and keeps serving', async () => {
    const fail = async (p: Promise<unknown>) => {
      try {
        await p;
      } catch (e) {
        return e as InstanceType<typeof OpenAI.APIError>;
      }
      throw new Error('expected an error');
    };
    const bad = await fail(
      server.client.completions.create({ model: RANDOM_MODEL_NAME, prompt: 'x', temperature: 9 }),
    );
    expect(bad.status).toBe(400);
    expect(bad.message).toContain('temperature');
    const unknown = await fail(server.client.completions.create({ model: 'gpt-17', prompt: 'x' }));
    expect(unknown.status).toBe(404);
    const long = await fail(
      server.client.completions.create({ model: RANDOM_MODEL_NAME, prompt: 'word '.repeat(3000) }),
    );
    expect(long.status).toBe(413);
    const wrong = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'sk-wrong', maxRetries: 0 });
    expect((await fail(wrong.models.list())).status).toBe(401);
    const raw = await fetch(`${server.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${'sk-kvasir-e2e'}` },
      body: '{"messages": [}',
    });
    expect(raw.status).toBe(400);
    const ok = await server.client.completions.create({
      ...greedy,
      prompt: 'still alive',
      max_tokens: 2,
    });
    expect(ok.choices).toHaveLength(1);
    expect(await eventually(async () => (await usedBlocks()) === 0)).toBe(true);
  });

  it('exposes latency histograms and token counters', async () => {
    const m = await server.metrics();
    expect(m.get('kvasir_time_to_first_token_seconds_count')).toBeGreaterThan(0);
    expect(m.get('kvasir_time_per_output_token_seconds_count')).toBeGreaterThan(0);
    expect(m.get('kvasir_e2e_request_latency_seconds_count')).toBeGreaterThan(0);
    expect(m.get('kvasir_generation_tokens_total')).toBeGreaterThan(0);
    expect(m.get('kvasir_kv_blocks{state="total"}')).toBeGreaterThan(0);
  });
});
