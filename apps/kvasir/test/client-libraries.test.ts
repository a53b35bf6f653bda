import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { chatTemplates } from '@kvasir/test-utils/fixtures';
import { ChatOpenAI } from '@langchain/openai';
import { generateObject, generateText, streamObject, tool } from 'ai';
import { Ajv } from 'ajv';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { API_KEY, type ServerProcess, startServer, writeTemplatedGgufs } from './harness.js';

// What applications send: the Vercel AI SDK's generateObject / streamObject / tools and
// LangChain.js's withStructuredOutput / bindTools, against a real `kvasir serve` of the random
// model with Qwen 2.5's chat template (Hermes tool calls). Its output is noise: each object
// that comes back matches its schema because the server constrained it.

const MODEL = 'clients-hermes';
const forecast = z.object({
  city: z.string().max(8),
  days: z.number().int().min(1).max(7),
  unit: z.enum(['c', 'f']),
});
// LangChain.js gets the JSON Schema: @langchain/core 0.3 turns a zod 4 schema into one
// without its bounds.
const forecastJsonSchema = {
  type: 'object',
  properties: {
    city: { type: 'string', maxLength: 8 },
    days: { type: 'integer', minimum: 1, maximum: 7 },
    unit: { enum: ['c', 'f'] },
  },
  required: ['city', 'days', 'unit'],
};
const matchesForecast = new Ajv({ strict: false }).compile(forecastJsonSchema);

let tmp: string;
let server: ServerProcess;
beforeAll(async () => {
  tmp = await mkdtemp(join(tmpdir(), 'kvasir-clients-'));
  const templates = await chatTemplates();
  await writeTemplatedGgufs(tmp, { [MODEL]: templates['Qwen-Qwen2.5-7B-Instruct.jinja']! });
  server = await startServer(['--model', join(tmp, `${MODEL}.gguf`)]);
}, 180_000);
afterAll(async () => {
  expect(await server?.stop()).toBe(0);
  await rm(tmp, { recursive: true, force: true });
});

describe('Vercel AI SDK (@ai-sdk/openai-compatible)', () => {
  const provider = () =>
    createOpenAICompatible({
      name: 'kvasir',
      baseURL: `${server.url}/v1`,
      apiKey: API_KEY,
      supportsStructuredOutputs: true,
    });

  it('generateObject returns an object of the schema', async () => {
    const { object } = await generateObject({
      model: provider()(MODEL),
      schema: forecast,
      prompt: 'Forecast for Oslo.',
      maxOutputTokens: 300,
      maxRetries: 0,
    });
    expect(matchesForecast(object)).toBe(true);
  });

  it('streamObject streams partial objects to one of the schema', async () => {
    const result = streamObject({
      model: provider()(MODEL),
      schema: forecast,
      prompt: 'Forecast for Oslo.',
      maxOutputTokens: 300,
      maxRetries: 0,
    });
    let partials = 0;
    for await (const _ of result.partialObjectStream) partials++;
    expect(partials).toBeGreaterThan(1);
    expect(matchesForecast(await result.object)).toBe(true);
  });

  it('generateText with a required tool returns a valid tool call', async () => {
    const result = await generateText({
      model: provider()(MODEL),
      tools: { get_weather: tool({ description: 'Weather', inputSchema: forecast }) },
      toolChoice: 'required',
      prompt: 'Weather in Oslo?',
      maxOutputTokens: 300,
      maxRetries: 0,
    });
    expect(result.finishReason).toBe('tool-calls');
    expect(result.toolCalls.length).toBeGreaterThan(0);
    for (const call of result.toolCalls) {
      expect(call.toolName).toBe('get_weather');
      expect(matchesForecast(call.input)).toBe(true);
    }
  });
});

describe('LangChain.js (@langchain/openai)', () => {
  const chat = () =>
    new ChatOpenAI({
      model: MODEL,
      apiKey: API_KEY,
      configuration: { baseURL: `${server.url}/v1` },
      maxRetries: 0,
      maxTokens: 300,
    });

  it.each(['jsonSchema', 'functionCalling'] as const)(
    'withStructuredOutput (%s) returns an object of the schema',
    async (method) => {
      const structured = chat().withStructuredOutput(forecastJsonSchema, {
        method,
        name: 'forecast',
      });
      expect(matchesForecast(await structured.invoke('Forecast for Oslo.'))).toBe(true);
    },
  );

  it('bindTools: the model answers with a valid tool call', async () => {
    const weather = {
      type: 'function' as const,
      function: { name: 'get_weather', description: 'Weather', parameters: forecastJsonSchema },
    };
    const message = await chat()
      .bindTools([weather], { tool_choice: 'required' })
      .invoke('Weather in Oslo?');
    expect(message.tool_calls?.length).toBeGreaterThan(0);
    for (const call of message.tool_calls ?? []) {
      expect(call.name).toBe('get_weather');
      expect(call.id).toMatch(/^call_/);
      expect(matchesForecast(call.args)).toBe(true);
    }
  });
});
