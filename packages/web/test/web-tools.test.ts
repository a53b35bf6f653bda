// Tools in the page: the engine in its worker on the tiny GGUF carrying Qwen 2.5's chat template
// (Hermes `<tool_call>` calls), driven through `chat.completions.create` as OpenAI's client
// would be. The model is noise, so every valid call below is the grammar's doing.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chatTemplates } from '@kvasir/test-utils/fixtures';
import { Ajv } from 'ajv';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type * as Kvasir from '../src/index.js';
import {
  launchChromium,
  pageWithEngines,
  startSite,
  type TestSite,
  writeTinyGguf,
} from './browser-harness.js';

declare const kvasir: typeof Kvasir;
declare const engine: Kvasir.WebEngine;

const weatherSchema = {
  type: 'object',
  properties: {
    city: { type: 'string', maxLength: 8 },
    days: { type: 'integer', minimum: 1, maximum: 7 },
    unit: { enum: ['c', 'f'] },
  },
  required: ['city', 'days', 'unit'],
  additionalProperties: false,
};
const TOOLS = [
  {
    type: 'function' as const,
    function: { name: 'get_weather', description: 'Weather', parameters: weatherSchema },
  },
  {
    type: 'function' as const,
    function: {
      name: 'now',
      parameters: { type: 'object', properties: {}, additionalProperties: false },
    },
  },
];
const ajv = new Ajv({ strict: false });
const validArguments: Record<string, ReturnType<typeof ajv.compile>> = {
  get_weather: ajv.compile(weatherSchema),
  now: ajv.compile(TOOLS[1]!.function.parameters),
};

function expectValidCalls(
  calls: readonly Kvasir.ChatCompletionMessageToolCall[] | undefined,
  names: readonly string[],
) {
  expect(calls?.length).toBeGreaterThan(0);
  for (const call of calls ?? []) {
    expect(call.type).toBe('function');
    expect(call.id).toMatch(/^call_[A-Za-z0-9]{24}$/);
    expect(names).toContain(call.function.name);
    const validate = validArguments[call.function.name]!;
    const args = JSON.parse(call.function.arguments) as unknown;
    expect(validate(args), JSON.stringify(validate.errors)).toBe(true);
  }
}

let root: string;
let site: TestSite;
let browser: Browser;
let page: Page;

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'kvasir-web-tools-'));
  const template = (await chatTemplates())['Qwen-Qwen2.5-7B-Instruct.jinja']!;
  site = await startSite(await writeTinyGguf(root, 31, template));
  browser = await launchChromium({ webgpu: false });
  page = await pageWithEngines(browser, site, { engine: 'tiny.gguf' });
}, 180_000);

afterAll(async () => {
  await browser?.close();
  await site?.close();
  await rm(root, { recursive: true, force: true });
});

describe('@kvasir/web tools in chromium (Hermes template)', () => {
  it("reads the model's tool-call format from its template", async () => {
    expect(await page.evaluate(() => engine.model.toolCallFormat)).toBe('hermes');
  });

  it('tool_choice required: valid calls of declared tools, finish_reason tool_calls', async () => {
    const res = await page.evaluate(
      (tools) =>
        engine.chat.completions.create({
          messages: [{ role: 'user', content: 'Weather in Oslo for 3 days?' }],
          tools,
          tool_choice: 'required',
          max_tokens: 400,
          seed: 11,
        }),
      TOOLS,
    );
    const choice = res.choices[0]!;
    expect(choice.finish_reason).toBe('tool_calls');
    expect(choice.message.content).toBeNull();
    expectValidCalls(choice.message.tool_calls, ['get_weather', 'now']);
  }, 120_000);

  it('a named tool: the streamed deltas rebuild the call the whole response makes', async () => {
    const result = await page.evaluate(async (tools) => {
      const body = {
        messages: [{ role: 'user' as const, content: 'Weather?' }],
        tools,
        tool_choice: { type: 'function' as const, function: { name: 'get_weather' } },
        parallel_tool_calls: false,
        max_tokens: 400,
        temperature: 0,
      };
      const whole = await engine.chat.completions.create(body);
      const stream = await engine.chat.completions.create({ ...body, stream: true });
      const deltas: Kvasir.ChatCompletionChunkToolCall[] = [];
      const finishes: (string | null)[] = [];
      let content = '';
      for await (const chunk of stream) {
        const choice = chunk.choices[0];
        if (!choice) continue;
        deltas.push(...(choice.delta.tool_calls ?? []));
        content += choice.delta.content ?? '';
        finishes.push(choice.finish_reason);
      }
      return { whole: whole.choices[0]!, deltas, finishes, content };
    }, TOOLS);
    expect(result.whole.finish_reason).toBe('tool_calls');
    expectValidCalls(result.whole.message.tool_calls, ['get_weather']);
    expect(result.whole.message.tool_calls).toHaveLength(1);
    // OpenAI's deltas: the first of a call has its id, type and name, the rest add arguments.
    const calls: { id: string; type: 'function'; function: { name: string; arguments: string } }[] =
      [];
    let argumentChunks = 0;
    for (const d of result.deltas) {
      if ('id' in d) {
        expect(d.index).toBe(calls.length);
        expect(d.type).toBe('function');
        calls.push({ id: d.id, type: d.type, function: { ...d.function } });
      } else {
        expect('name' in d.function).toBe(false);
        calls[d.index]!.function.arguments += d.function.arguments;
        argumentChunks++;
      }
    }
    expect(argumentChunks).toBeGreaterThan(1);
    expect(result.content).toBe('');
    expect(result.finishes.filter((f) => f !== null)).toEqual(['tool_calls']);
    expect(result.finishes.at(-1)).toBe('tool_calls');
    expectValidCalls(calls, ['get_weather']);
    // Greedy: the same call, streamed or whole (ids are fresh each time).
    expect(calls.map((c) => c.function)).toEqual(
      result.whole.message.tool_calls!.map((c) => c.function),
    );
  }, 120_000);

  it('takes the calls and the tool results back through the chat template', async () => {
    const result = await page.evaluate(async (tools) => {
      const first = await engine.chat.completions.create({
        messages: [{ role: 'user', content: 'Weather?' }],
        tools,
        tool_choice: { type: 'function', function: { name: 'get_weather' } },
        parallel_tool_calls: false,
        max_tokens: 400,
      });
      const message = first.choices[0]!.message;
      const second = await engine.chat.completions.create({
        messages: [
          { role: 'user', content: 'Weather?' },
          { role: 'assistant', content: null, tool_calls: message.tool_calls! },
          { role: 'tool', tool_call_id: message.tool_calls![0]!.id, content: '{"temp": 21}' },
        ],
        tools,
        tool_choice: 'none',
        max_tokens: 4,
      });
      return { first: first.usage, second: second.choices[0]!, usage: second.usage };
    }, TOOLS);
    expect(result.second.message.tool_calls).toBeUndefined();
    expect(typeof result.second.message.content).toBe('string');
    expect(result.usage.prompt_tokens).toBeGreaterThan(
      result.first.prompt_tokens + result.first.completion_tokens,
    );
  }, 120_000);

  it('refuses an unknown tool before decoding: INVALID_REQUEST naming tool_choice', async () => {
    const error = await page.evaluate(async (tools) => {
      try {
        await engine.chat.completions.create({
          messages: [{ role: 'user', content: 'x' }],
          tools,
          tool_choice: { type: 'function', function: { name: 'launch' } },
        });
        return undefined;
      } catch (e) {
        const w = e as Kvasir.WebEngineError;
        return {
          isWebEngineError: kvasir.WebEngineError.isInstance(e),
          code: w.code,
          param: w.details?.param,
        };
      }
    }, TOOLS);
    expect(error).toEqual({
      isWebEngineError: true,
      code: 'INVALID_REQUEST',
      param: 'tool_choice',
    });
  });
});
