import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chatTemplates } from '@kvasir/test-utils/fixtures';
import { Ajv } from 'ajv';
import type OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ServerProcess, startServer, writeVocabularyGguf } from './harness.js';

// `tool_choice: auto` end to end, on models that really write their family's trigger: the
// random model over Qwen 2.5's vocabulary with its `<tool_call>` token (a user-defined token at
// its own id) and Qwen's template, and over Mistral Nemo's Tekken vocabulary with its
// `[TOOL_CALLS]` control token and Nemo's template. A `logit_bias` of +100 on the trigger makes
// the model open a call as its first token; everything after it is the grammar's (the model
// is noise). With -100 on it the model answers in text. Both through a real `kvasir serve`
// and the official client, streamed and not.

const templates = await chatTemplates();

const FAMILIES = [
  {
    format: 'hermes',
    spec: {
      vocab: 'qwen2',
      chatTemplate: templates['Qwen-Qwen2.5-7B-Instruct.jinja']!,
      rename: { '[PAD151657]': '<tool_call>', '[PAD151658]': '</tool_call>' },
    },
    trigger: '<tool_call>',
    idPattern: /^call_[A-Za-z0-9]{24}$/,
  },
  {
    format: 'mistral',
    spec: {
      vocab: 'gpt-2-tekken',
      chatTemplate: templates['mistralai-Mistral-Nemo-Instruct-2407.jinja']!,
      append: [{ piece: '[TOOL_CALLS]', type: 'control' }] as const,
    },
    trigger: '[TOOL_CALLS]',
    idPattern: /^[A-Za-z0-9]{9}$/,
  },
] as const;

const weatherSchema = {
  type: 'object',
  properties: {
    city: { type: 'string', maxLength: 8 },
    days: { type: 'integer', minimum: 1, maximum: 7 },
  },
  required: ['city', 'days'],
  additionalProperties: false,
};
const TOOLS: OpenAI.ChatCompletionFunctionTool[] = [
  {
    type: 'function',
    function: { name: 'get_weather', description: 'Weather', parameters: weatherSchema },
  },
];
const validWeather = new Ajv({ strict: false }).compile(weatherSchema);

type Call = { id: string; type: string; function: { name: string; arguments: string } };

function expectOneValidCall(calls: readonly Call[] | undefined, idPattern: RegExp) {
  expect(calls).toHaveLength(1);
  const call = calls![0]!;
  expect(call.type).toBe('function');
  expect(call.id).toMatch(idPattern);
  expect(call.function.name).toBe('get_weather');
  const args = JSON.parse(call.function.arguments) as unknown;
  expect(validWeather(args), JSON.stringify(validWeather.errors)).toBe(true);
}

let tmp: string;
beforeAll(async () => {
  tmp = await mkdtemp(join(tmpdir(), 'kvasir-auto-tools-'));
});
afterAll(async () => {
  await rm(tmp, { recursive: true, force: true });
});

describe.each(FAMILIES)('tool_choice auto ($format)', ({ format, spec, trigger, idPattern }) => {
  let server: ServerProcess;
  let triggerId: number;
  const model = `auto-${format}`;
  beforeAll(async () => {
    const ids = await writeVocabularyGguf(join(tmp, `${model}.gguf`), spec);
    triggerId = ids[trigger]!;
    server = await startServer(['--model', join(tmp, `${model}.gguf`)]);
  }, 120_000);
  afterAll(async () => {
    expect(await server.stop()).toBe(0);
  });

  const request = (bias: number) => ({
    model,
    messages: [{ role: 'user' as const, content: 'Weather in Oslo for 3 days?' }],
    tools: TOOLS,
    tool_choice: 'auto' as const,
    parallel_tool_calls: false,
    logit_bias: { [triggerId]: bias },
    max_tokens: 200,
    temperature: 1,
    seed: 3,
  });

  it('the model opens a call: the rest is a valid call, finish_reason tool_calls', async () => {
    const res = await server.client.chat.completions.create(request(100));
    const choice = res.choices[0]!;
    expect(choice.finish_reason).toBe('tool_calls');
    expect(choice.message.content ?? '').toBe('');
    expectOneValidCall(choice.message.tool_calls as Call[], idPattern);
  });

  it('streamed: the deltas rebuild one valid call', async () => {
    const stream = await server.client.chat.completions.create({
      ...request(100),
      stream: true,
    });
    const calls: Call[] = [];
    let content = '';
    let finish: string | null = null;
    for await (const chunk of stream) {
      const choice = chunk.choices[0];
      if (!choice) continue;
      content += choice.delta.content ?? '';
      for (const d of choice.delta.tool_calls ?? []) {
        if (d.id !== undefined) {
          calls.push({
            id: d.id,
            type: d.type!,
            function: { name: d.function!.name!, arguments: d.function!.arguments ?? '' },
          });
        } else calls[d.index]!.function.arguments += d.function!.arguments!;
      }
      if (choice.finish_reason) finish = choice.finish_reason;
    }
    expect(finish).toBe('tool_calls');
    expect(content).toBe('');
    expectOneValidCall(calls, idPattern);
  });

  it('the model does not open one: it answers in text, streamed and not', async () => {
    const res = await server.client.chat.completions.create({ ...request(-100), max_tokens: 24 });
    const choice = res.choices[0]!;
    expect(choice.message.tool_calls).toBeUndefined();
    expect(['stop', 'length']).toContain(choice.finish_reason);
    expect(choice.message.content!.length).toBeGreaterThan(0);
    expect(choice.message.content).not.toContain(trigger);

    const stream = await server.client.chat.completions.create({
      ...request(-100),
      max_tokens: 24,
      stream: true,
    });
    let text = '';
    let finish: string | null = null;
    for await (const chunk of stream) {
      const c = chunk.choices[0];
      if (!c) continue;
      expect(c.delta.tool_calls).toBeUndefined();
      text += c.delta.content ?? '';
      if (c.finish_reason) finish = c.finish_reason;
    }
    // The same seed: the same text.
    expect(text).toBe(choice.message.content);
    expect(finish).toBe(choice.finish_reason);
  });
});
