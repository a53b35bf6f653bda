import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chatTemplates } from '@kvasir/test-utils/fixtures';
import { Ajv } from 'ajv';
import type OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ServerProcess, startServer, writeTemplatedGgufs } from './harness.js';

// Structured outputs and tools through a real `kvasir serve` and the official OpenAI client,
// on GGUF files of the random model whose chat templates are three families' real ones
// (Qwen 2.5's Hermes calls, Llama 3.1's JSON, Mistral Nemo's [TOOL_CALLS]). The model is noise,
// so every valid answer below is the grammar's doing.

const templates = await chatTemplates();

const FAMILIES = [
  { format: 'hermes', template: 'Qwen-Qwen2.5-7B-Instruct.jinja', parallel: true },
  { format: 'llama3_json', template: 'meta-llama-Llama-3.1-8B-Instruct.jinja', parallel: false },
  { format: 'mistral', template: 'mistralai-Mistral-Nemo-Instruct-2407.jinja', parallel: true },
] as const;

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
const TOOLS: OpenAI.ChatCompletionFunctionTool[] = [
  {
    type: 'function',
    function: { name: 'get_weather', description: 'Weather', parameters: weatherSchema },
  },
  {
    type: 'function',
    function: {
      name: 'now',
      parameters: { type: 'object', properties: {}, additionalProperties: false },
    },
  },
];
const ajv = new Ajv({ strict: false });
const validArguments = {
  get_weather: ajv.compile(weatherSchema),
  now: ajv.compile(TOOLS[1]!.function.parameters!),
};

let tmp: string;
beforeAll(async () => {
  tmp = await mkdtemp(join(tmpdir(), 'kvasir-tools-'));
  await writeTemplatedGgufs(
    tmp,
    Object.fromEntries(FAMILIES.map((f) => [`tools-${f.format}`, templates[f.template]!])),
  );
}, 120_000);
afterAll(async () => {
  await rm(tmp, { recursive: true, force: true });
});

function expectValidCalls(
  calls: readonly { id: string; type: string; function: { name: string; arguments: string } }[],
  format: string,
  names: readonly string[],
) {
  expect(calls.length).toBeGreaterThan(0);
  for (const call of calls) {
    expect(call.type).toBe('function');
    expect(call.id).toMatch(format === 'mistral' ? /^[A-Za-z0-9]{9}$/ : /^call_[A-Za-z0-9]{24}$/);
    expect(names).toContain(call.function.name);
    const validate = validArguments[call.function.name as keyof typeof validArguments];
    const args = JSON.parse(call.function.arguments) as unknown;
    expect(validate(args), JSON.stringify(validate.errors)).toBe(true);
  }
}

describe.each(FAMILIES)('tools through kvasir serve ($format)', ({ format, parallel }) => {
  let server: ServerProcess;
  const model = `tools-${format}`;
  beforeAll(async () => {
    server = await startServer(['--model', join(tmp, `${model}.gguf`)]);
  }, 120_000);
  afterAll(async () => {
    expect(await server.stop()).toBe(0);
  });

  it('tool_choice required: valid calls of declared tools, finish_reason tool_calls', async () => {
    const res = await server.client.chat.completions.create({
      model,
      messages: [{ role: 'user', content: 'Weather in Oslo for 3 days?' }],
      tools: TOOLS,
      tool_choice: 'required',
      max_tokens: 400,
      temperature: 1,
      seed: 11,
    });
    const choice = res.choices[0]!;
    expect(choice.finish_reason).toBe('tool_calls');
    expect(choice.message.content).toBeNull();
    const calls = choice.message.tool_calls as Parameters<typeof expectValidCalls>[0];
    expectValidCalls(calls, format, ['get_weather', 'now']);
    if (!parallel) expect(calls).toHaveLength(1);
  });

  it('a named tool, streamed: OpenAI-shaped deltas that rebuild one valid call', async () => {
    const stream = await server.client.chat.completions.create({
      model,
      messages: [{ role: 'user', content: 'Weather?' }],
      tools: TOOLS,
      tool_choice: { type: 'function', function: { name: 'get_weather' } },
      parallel_tool_calls: false,
      max_tokens: 400,
      stream: true,
      seed: 5,
    });
    const calls: { id: string; type: string; function: { name: string; arguments: string } }[] = [];
    let finish: string | null = null;
    let argumentChunks = 0;
    for await (const chunk of stream) {
      const choice = chunk.choices[0];
      if (!choice) continue;
      for (const d of choice.delta.tool_calls ?? []) {
        if (d.id !== undefined) {
          expect(d.index).toBe(calls.length);
          expect(d.type).toBe('function');
          calls.push({
            id: d.id,
            type: d.type!,
            function: { name: d.function!.name!, arguments: d.function!.arguments ?? '' },
          });
        } else {
          expect(d.function?.name).toBeUndefined();
          calls[d.index]!.function.arguments += d.function!.arguments!;
          argumentChunks++;
        }
      }
      if (choice.finish_reason) finish = choice.finish_reason;
    }
    expect(finish).toBe('tool_calls');
    expect(calls).toHaveLength(1);
    expect(argumentChunks).toBeGreaterThan(1);
    expectValidCalls(calls, format, ['get_weather']);
  });

  it('takes the calls and the tool results back through the chat template', async () => {
    const first = await server.client.chat.completions.create({
      model,
      messages: [{ role: 'user', content: 'Weather?' }],
      tools: TOOLS,
      tool_choice: { type: 'function', function: { name: 'get_weather' } },
      parallel_tool_calls: false,
      max_tokens: 400,
    });
    const message = first.choices[0]!.message;
    const call = message.tool_calls![0]!;
    const second = await server.client.chat.completions.create({
      model,
      messages: [
        { role: 'user', content: 'Weather?' },
        { role: 'assistant', content: null, tool_calls: message.tool_calls! },
        { role: 'tool', tool_call_id: call.id, content: '{"temp": 21}' },
      ],
      tools: TOOLS,
      tool_choice: 'none',
      max_tokens: 4,
    });
    expect(second.choices[0]!.message.tool_calls).toBeUndefined();
    expect(second.usage!.prompt_tokens).toBeGreaterThan(first.usage!.prompt_tokens);
  });

  it('refuses an unknown tool before decoding', async () => {
    const error = await server.client.chat.completions
      .create({
        model,
        messages: [{ role: 'user', content: 'x' }],
        tools: TOOLS,
        tool_choice: { type: 'function', function: { name: 'launch' } },
      })
      .then(
        () => undefined,
        (e: unknown) => e as InstanceType<typeof OpenAI.APIError>,
      );
    expect(error?.status).toBe(400);
    expect(error?.param).toBe('tool_choice');
  });
});

describe('structured outputs through kvasir serve', () => {
  let server: ServerProcess;
  const model = 'tools-hermes';
  beforeAll(async () => {
    server = await startServer(['--model', join(tmp, `${model}.gguf`)]);
  }, 120_000);
  afterAll(async () => {
    expect(await server.stop()).toBe(0);
  });

  it('response_format json_schema (strict): every stopped choice validates', async () => {
    const res = await server.client.chat.completions.create({
      model,
      messages: [{ role: 'user', content: 'A forecast as JSON.' }],
      response_format: {
        type: 'json_schema',
        json_schema: { name: 'forecast', schema: weatherSchema, strict: true },
      },
      n: 3,
      max_tokens: 200,
    });
    const validate = ajv.compile(weatherSchema);
    for (const choice of res.choices) {
      expect(choice.finish_reason).toBe('stop');
      expect(validate(JSON.parse(choice.message.content!))).toBe(true);
    }
  });

  it("vLLM's guided_regex and guided_choice on completions", async () => {
    const regex = await server.client.completions.create({
      model,
      prompt: 'Date:',
      max_tokens: 40,
      guided_regex: '20[0-9]{2}-(0[1-9]|1[0-2])-[0-3][0-9]',
    } as OpenAI.CompletionCreateParamsNonStreaming);
    expect(regex.choices[0]!.text).toMatch(/^20[0-9]{2}-(0[1-9]|1[0-2])-[0-3][0-9]$/);
    const choice = await server.client.completions.create({
      model,
      prompt: 'Yes or no?',
      max_tokens: 10,
      guided_choice: ['yes', 'no'],
    } as OpenAI.CompletionCreateParamsNonStreaming);
    expect(['yes', 'no']).toContain(choice.choices[0]!.text);
  });

  it('ends a constrained choice cut by max_tokens with length', async () => {
    const res = await server.client.chat.completions.create({
      model,
      messages: [{ role: 'user', content: 'JSON' }],
      response_format: { type: 'json_object' },
      max_tokens: 2,
    });
    expect(res.choices[0]!.finish_reason).toBe('length');
  });

  it.each([
    [
      'response_format',
      {
        response_format: {
          type: 'json_schema',
          json_schema: {
            name: 'x',
            schema: { type: 'object', properties: { a: { type: 'nonsense' } } },
          },
        },
      },
    ],
    ['guided_regex', { guided_regex: '(unclosed' }],
    ['guided_grammar', { guided_grammar: 'root ::= "a" | ' }],
    ['logit_bias', { logit_bias: { '999999': 5 } }],
  ])('refuses a bad %s with a 400 naming it, before decoding', async (param, fields) => {
    const error = await server.client.chat.completions
      .create({ model, messages: [{ role: 'user', content: 'x' }], ...fields } as never)
      .then(
        () => undefined,
        (e: unknown) => e as InstanceType<typeof OpenAI.APIError>,
      );
    expect(error?.status).toBe(400);
    expect(error?.param).toBe(param);
  });
});
