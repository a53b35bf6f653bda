// The AI SDK provider in headless chromium: `streamText` and `generateText` from the `ai`
// package run in the page on a real engine in its worker, with no server.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chatTemplates } from '@kvasir/test-utils/fixtures';
import type { generateText, jsonSchema, Output, streamText, tool } from 'ai';
import { Ajv } from 'ajv';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type * as AiSdk from '../src/ai-sdk.js';
import type * as Kvasir from '../src/index.js';
import {
  launchChromium,
  pageWithEngines,
  startSite,
  type TestSite,
  writeTinyGguf,
} from './browser-harness.js';

declare const kvasir: typeof Kvasir;
declare const aiSdk: typeof AiSdk;
declare const ai: {
  generateText: typeof generateText;
  streamText: typeof streamText;
  Output: typeof Output;
  jsonSchema: typeof jsonSchema;
  tool: typeof tool;
};
declare const engine: Kvasir.WebEngine;
/** The same model with Qwen 2.5's chat template (Hermes tool calls). */
declare const toolsEngine: Kvasir.WebEngine;

const WEATHER = {
  type: 'object',
  properties: {
    city: { type: 'string', maxLength: 8 },
    days: { type: 'integer', minimum: 1, maximum: 7 },
  },
  required: ['city', 'days'],
  additionalProperties: false,
};
const validWeather = new Ajv({ strict: false }).compile(WEATHER);

let root: string;
let site: TestSite;
let browser: Browser;
let page: Page;

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'kvasir-ai-sdk-'));
  const template = (await chatTemplates())['Qwen-Qwen2.5-7B-Instruct.jinja']!;
  const tools = await writeTinyGguf(join(root, 'tools'), 31, template);
  site = await startSite(await writeTinyGguf(root), { '/tools.gguf': tools });
  browser = await launchChromium({ webgpu: false });
  page = await pageWithEngines(browser, site, { engine: 'tiny.gguf', toolsEngine: 'tools.gguf' });
}, 180_000);

afterAll(async () => {
  await browser?.close();
  await site?.close();
  await rm(root, { recursive: true, force: true });
});

describe('@kvasir/web/ai-sdk in chromium', () => {
  it('streamText streams what the engine answers, with usage and cache reads on a repeat', async () => {
    const result = await page.evaluate(async () => {
      const prompt = 'Tell me about paged attention in a browser tab.';
      const model = aiSdk.kvasir(engine, { ignore_eos: true });
      const run = async () => {
        const r = ai.streamText({ model, prompt, temperature: 0, maxOutputTokens: 12 });
        const deltas: string[] = [];
        for await (const t of r.textStream) deltas.push(t);
        return { deltas, finishReason: await r.finishReason, usage: await r.usage };
      };
      const first = await run();
      const second = await run();
      const direct = await engine.chat.completions.create({
        messages: [{ role: 'user', content: prompt }],
        temperature: 0,
        max_tokens: 12,
        ignore_eos: true,
      });
      const generated = await ai.generateText({
        model,
        prompt,
        temperature: 0,
        maxOutputTokens: 12,
      });
      return {
        first,
        second,
        direct: direct.choices[0]!.message.content,
        generated: { text: generated.text, finishReason: generated.finishReason },
        blockSize: engine.model.blockSize,
      };
    });
    const { first, second } = result;
    expect(first.deltas.length).toBeGreaterThan(1);
    expect(first.deltas.join('')).toBe(result.direct);
    expect(result.generated).toEqual({ text: result.direct, finishReason: 'length' });
    expect(first.finishReason).toBe('length');
    expect(first.usage.outputTokens).toBe(12);
    const promptTokens = first.usage.inputTokens!;
    expect(second.usage.inputTokens).toBe(promptTokens);
    // The repeat's full prompt blocks came from the prefix cache: reported as cache reads.
    const cached = Math.floor((promptTokens - 1) / result.blockSize) * result.blockSize;
    expect(cached).toBeGreaterThan(0);
    expect(second.usage.inputTokenDetails.cacheReadTokens).toBe(cached);
    expect(second.usage.inputTokenDetails.noCacheTokens).toBe(promptTokens - cached);
  }, 120_000);

  it('an abortSignal mid-stream ends the request and gives its blocks back', async () => {
    const result = await page.evaluate(async () => {
      const controller = new AbortController();
      const r = ai.streamText({
        model: aiSdk.kvasir(engine, { ignore_eos: true }),
        prompt: 'one two three four five six seven',
        temperature: 0,
        maxOutputTokens: 400,
        abortSignal: controller.signal,
      });
      let deltas = 0;
      let during = 0;
      for await (const part of r.fullStream) {
        if (part.type === 'text-delta' && ++deltas === 3) {
          during = (await engine.stats()).blocks.used;
          controller.abort();
        }
      }
      let after = await engine.stats();
      for (let i = 0; i < 100 && after.blocks.used > 0; i++) {
        await new Promise((res) => setTimeout(res, 20));
        after = await engine.stats();
      }
      return { deltas, during, after: after.blocks.used, running: after.requests.running };
    });
    expect(result.during).toBeGreaterThan(0);
    expect(result.deltas).toBeLessThan(400);
    expect(result.after).toBe(0);
    expect(result.running).toBe(0);
  }, 120_000);

  it('generateText with Output.object returns an object that fits the schema, enforced in the page', async () => {
    const result = await page.evaluate(async () => {
      const generated = await ai.generateText({
        model: aiSdk.kvasir(engine),
        prompt: 'Describe a city as JSON.',
        temperature: 0,
        maxOutputTokens: 96,
        output: ai.Output.object({
          schema: ai.jsonSchema<{ name: string; size: 'small' | 'large'; rivers: number }>({
            type: 'object',
            properties: {
              name: { type: 'string', maxLength: 12 },
              size: { type: 'string', enum: ['small', 'large'] },
              rivers: { type: 'integer', minimum: 0, maximum: 9 },
            },
            required: ['name', 'size', 'rivers'],
            additionalProperties: false,
          }),
        }),
      });
      return { output: generated.output, finishReason: generated.finishReason };
    });
    expect(result.finishReason).toBe('stop');
    expect(Object.keys(result.output).sort()).toEqual(['name', 'rivers', 'size']);
    expect(typeof result.output.name).toBe('string');
    expect(result.output.name.length).toBeLessThanOrEqual(12);
    expect(['small', 'large']).toContain(result.output.size);
    expect(Number.isInteger(result.output.rivers)).toBe(true);
    expect(result.output.rivers).toBeGreaterThanOrEqual(0);
    expect(result.output.rivers).toBeLessThanOrEqual(9);
  }, 120_000);

  it('generateText with a tool and toolChoice required: tool calls whose input fits the schema', async () => {
    const result = await page.evaluate(
      async ({ schema }) => {
        const weather = ai.tool({
          description: 'Weather in a city',
          inputSchema: ai.jsonSchema<{ city: string; days: number }>(schema),
        });
        const generated = await ai.generateText({
          model: aiSdk.kvasir(toolsEngine),
          prompt: 'Weather in Oslo for 3 days?',
          tools: { weather },
          toolChoice: 'required',
          maxOutputTokens: 200,
          seed: 11,
        });
        return {
          finishReason: generated.finishReason,
          text: generated.text,
          calls: generated.toolCalls.map((c) => ({
            id: c.toolCallId,
            name: c.toolName,
            input: c.input,
          })),
        };
      },
      { schema: WEATHER },
    );
    expect(result.finishReason).toBe('tool-calls');
    expect(result.text).toBe('');
    expect(result.calls.length).toBeGreaterThan(0);
    for (const call of result.calls) {
      expect(call.name).toBe('weather');
      expect(call.id).toMatch(/^call_[A-Za-z0-9]{24}$/);
      expect(validWeather(call.input), JSON.stringify(validWeather.errors)).toBe(true);
    }
  }, 120_000);

  it('streamText with a named tool: tool-input parts, then the tool call they spell', async () => {
    const result = await page.evaluate(
      async ({ schema }) => {
        const r = ai.streamText({
          model: aiSdk.kvasir(toolsEngine),
          prompt: 'Weather?',
          tools: {
            weather: ai.tool({
              inputSchema: ai.jsonSchema<{ city: string; days: number }>(schema),
            }),
          },
          toolChoice: { type: 'tool', toolName: 'weather' },
          maxOutputTokens: 200,
          temperature: 0,
        });
        const parts: { type: string; id?: string; delta?: string; input?: unknown }[] = [];
        for await (const p of r.fullStream) {
          if (p.type === 'tool-input-start' || p.type === 'tool-input-end') {
            parts.push({ type: p.type, id: p.id });
          } else if (p.type === 'tool-input-delta') {
            parts.push({ type: p.type, id: p.id, delta: p.delta });
          } else if (p.type === 'tool-call') {
            parts.push({ type: p.type, id: p.toolCallId, input: p.input });
          }
        }
        return { parts, finishReason: await r.finishReason };
      },
      { schema: WEATHER },
    );
    expect(result.finishReason).toBe('tool-calls');
    const types = result.parts.map((p) => p.type);
    expect(types[0]).toBe('tool-input-start');
    expect(types.slice(-2)).toEqual(['tool-input-end', 'tool-call']);
    expect(types.filter((t) => t === 'tool-input-delta').length).toBeGreaterThan(1);
    const id = result.parts[0]!.id;
    expect(result.parts.every((p) => p.id === id)).toBe(true);
    const spelled = result.parts
      .filter((p) => p.type === 'tool-input-delta')
      .map((p) => p.delta)
      .join('');
    const call = result.parts.at(-1)!;
    expect(call.input).toEqual(JSON.parse(spelled));
    expect(validWeather(call.input), JSON.stringify(validWeather.errors)).toBe(true);
  }, 120_000);
});
