// @kvasir/web end to end in headless chromium: the engine in its Web Worker on a tiny GGUF,
// driven through the page's OpenAI-shaped API.
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type * as Kvasir from '../src/index.js';
import { launchChromium, startSite, type TestSite, writeTinyGguf } from './browser-harness.js';

declare const kvasir: typeof Kvasir;
declare const engine: Kvasir.WebEngine;

let root: string;
let site: TestSite;
let browser: Browser;

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'kvasir-web-'));
  site = await startSite(await writeTinyGguf(root));
  browser = await launchChromium({ webgpu: true });
}, 120_000);

afterAll(async () => {
  await browser?.close();
  await site?.close();
  await rm(root, { recursive: true, force: true });
});

interface Loaded {
  page: Page;
  backend: Kvasir.BackendReport;
  model: Kvasir.ModelInfo;
}

/**
 * A page of the site with the engine loaded as `window.engine`, and its report. A browser gets
 * a fresh context (its own Cache Storage); a context is reused (a reload, a second tab).
 */
async function openEngine(
  where: Browser | BrowserContext,
  path: '/coi/' | '/plain/',
  options: Record<string, unknown> = {},
): Promise<Loaded> {
  const context = 'newContext' in where ? await where.newContext() : where;
  const page = await context.newPage();
  const logs: string[] = [];
  page.on('console', (m) => logs.push(m.text()));
  page.on('pageerror', (e) => logs.push(e.message));
  await page.goto(`${site.origin}${path}`);
  return loadEngine(page, options, logs);
}

async function loadEngine(
  page: Page,
  options: Record<string, unknown>,
  logs: string[] = [],
): Promise<Loaded> {
  await page.waitForFunction(() => 'kvasir' in globalThis);
  try {
    const report = await page.evaluate(async (o) => {
      const e = await kvasir.createEngine({
        model: 'tiny.gguf',
        worker: 'worker.js',
        threads: 2,
        ...o,
      });
      (globalThis as unknown as { engine: Kvasir.WebEngine }).engine = e;
      return { backend: e.backend, model: e.model };
    }, options);
    return { page, ...report };
  } catch (error) {
    throw new Error(`${(error as Error).message}\n${logs.join('\n')}`);
  }
}

const GREEDY = { temperature: 0, ignore_eos: true } as const;

describe('@kvasir/web in chromium', () => {
  it('streams a chat on wasm threads in an isolated page (software WebGPU passed by), as a whole answer gives it', async () => {
    const { page, backend, model } = await openEngine(browser, '/coi/');
    try {
      expect(backend.backend).toBe('wasm');
      expect(backend.threads).toBe(2);
      expect(backend.reason).toMatch(/software/);
      expect(backend.reason).toMatch(/cross-origin isolated/);
      expect(model.fromCache).toBe(false);
      const result = await page.evaluate(async (greedy) => {
        const messages = [{ role: 'user' as const, content: 'Hello from a browser' }];
        const stream = await engine.chat.completions.create({
          messages,
          stream: true,
          max_tokens: 12,
          stream_options: { include_usage: true },
          ...greedy,
        });
        const chunks: Kvasir.ChatCompletionChunk[] = [];
        for await (const c of stream) chunks.push(c);
        const whole = await engine.chat.completions.create({ messages, max_tokens: 12, ...greedy });
        return { chunks, whole };
      }, GREEDY);
      const deltas = result.chunks.filter((c) => c.choices.length > 0);
      expect(deltas.length).toBeGreaterThan(1);
      expect(deltas[0]!.choices[0]!.delta.role).toBe('assistant');
      expect(deltas.at(-1)!.choices[0]!.finish_reason).toBe('length');
      const text = deltas.map((c) => c.choices[0]!.delta.content).join('');
      expect(text).toBe(result.whole.choices[0]!.message.content);
      expect(result.whole.choices[0]!.finish_reason).toBe('length');
      const usage = result.chunks.at(-1)!.usage!;
      expect(usage.completion_tokens).toBe(12);
      expect(usage.prompt_tokens).toBeGreaterThan(3);
      expect(result.whole.usage).toMatchObject({
        completion_tokens: 12,
        prompt_tokens: usage.prompt_tokens,
      });
      // The whole answer's prompt was the streamed one's: its full blocks came from the cache.
      expect(result.whole.usage.prompt_tokens_details.cached_tokens).toBe(
        Math.floor((usage.prompt_tokens - 1) / model.blockSize) * model.blockSize,
      );
    } finally {
      await page.close();
    }
  }, 180_000);

  it('aborting mid-stream throws AbortError and gives every block back', async () => {
    const { page } = await openEngine(browser, '/coi/');
    try {
      const result = await page.evaluate(async (greedy) => {
        const controller = new AbortController();
        const stream = await engine.completions.create(
          { prompt: 'one two three four five six seven', stream: true, max_tokens: 400, ...greedy },
          { signal: controller.signal },
        );
        let chunks = 0;
        let during: Kvasir.WebEngineStats | undefined;
        let error = '';
        try {
          for await (const _ of stream) {
            if (++chunks === 3) {
              during = await engine.stats();
              controller.abort();
            }
          }
        } catch (e) {
          error = (e as Error).name;
        }
        // The worker ends the request between steps: wait for its blocks.
        let after = await engine.stats();
        for (let i = 0; i < 100 && (after.blocks.used > 0 || after.requests.running > 0); i++) {
          await new Promise((r) => setTimeout(r, 20));
          after = await engine.stats();
        }
        return { chunks, error, during: during!, after };
      }, GREEDY);
      expect(result.error).toBe('AbortError');
      expect(result.chunks).toBe(3);
      expect(result.during.blocks.used).toBeGreaterThan(0);
      expect(result.after.requests.running).toBe(0);
      expect(result.after.blocks.used).toBe(0);
    } finally {
      await page.close();
    }
  }, 180_000);

  it('runs 8 concurrent chats in shared steps (continuous batching)', async () => {
    const { page } = await openEngine(browser, '/coi/');
    try {
      const result = await page.evaluate(async (greedy) => {
        const before = (await engine.stats()).steps;
        const answers = await Promise.all(
          Array.from({ length: 8 }, (_, i) =>
            engine.chat.completions.create({
              messages: [{ role: 'user', content: `chat number ${i}` }],
              max_tokens: 16,
              ...greedy,
            }),
          ),
        );
        const after = await engine.stats();
        return {
          steps: after.steps - before,
          tokens: answers.reduce((a, r) => a + r.usage.completion_tokens, 0),
          used: after.blocks.used,
        };
      }, GREEDY);
      expect(result.tokens).toBe(8 * 16);
      // One at a time would take at least 8 × 16 steps; batched, the decodes share steps.
      expect(result.steps).toBeLessThan(8 * 16);
      expect(result.steps).toBeLessThanOrEqual(16 + 8 + 4);
      expect(result.used).toBe(0);
    } finally {
      await page.close();
    }
  }, 180_000);

  it("kvSnapshot shows two streaming chats sharing a system prompt's blocks, as the engine counts them", async () => {
    const { page, model } = await openEngine(browser, '/coi/');
    try {
      const result = await page.evaluate(async (greedy) => {
        const system = 'You are a careful assistant. '.repeat(12);
        const open = (user: string) =>
          engine.chat.completions.create({
            messages: [
              { role: 'system', content: system },
              { role: 'user', content: user },
            ],
            stream: true,
            max_tokens: 40,
            ...greedy,
          });
        // The first fills the prefix cache; the second, started while it runs, shares it.
        const a = (await open('first'))[Symbol.asyncIterator]();
        const idA = (await a.next()).value!.id;
        const b = (await open('second'))[Symbol.asyncIterator]();
        const idB = (await b.next()).value!.id;
        const during = await engine.kvSnapshot();
        await a.return?.(undefined);
        await b.return?.(undefined);
        let after = await engine.kvSnapshot();
        for (let i = 0; i < 100 && after.requests.length > 0; i++) {
          await new Promise((r) => setTimeout(r, 20));
          after = await engine.kvSnapshot();
        }
        const states = (s: Kvasir.WebKvSnapshot) => {
          const count = { free: 0, cached: 0, used: 0, shared: 0 };
          for (let i = 0; i < s.refCounts.length; i++) count[kvasir.blockState(s, i)]++;
          return count;
        };
        return {
          idA,
          idB,
          during,
          after,
          duringStates: states(during),
          afterStates: states(after),
        };
      }, GREEDY);
      const { during, after } = result;
      expect(during.refCounts.length).toBe(model.numBlocks);
      expect(during.blockSize).toBe(model.blockSize);
      expect(result.duringStates.used + result.duringStates.shared).toBe(during.stats.blocks.used);
      expect(result.duringStates.cached).toBe(during.stats.blocks.cached);
      expect(result.duringStates.free).toBe(during.stats.blocks.free);
      const table = (id: string) => during.requests.find((r) => r.id === id)!.seqs[0]!.blocks;
      const [ta, tb] = [table(result.idA), table(result.idB)];
      const shared = ta.filter((block) => tb.includes(block));
      // The system prompt is 12 × 6 tokens at least: its first 4 full blocks are in both tables.
      expect(shared.length).toBeGreaterThanOrEqual(4);
      for (const block of shared) expect(during.refCounts[block]).toBe(2);
      expect(during.requests.find((r) => r.id === result.idB)!.cachedPromptTokens).toBe(
        shared.length * model.blockSize,
      );
      // Both ended: nothing is held, the system prompt's blocks stay cached for the next chat.
      expect(after.requests).toEqual([]);
      expect(after.stats.blocks.used).toBe(0);
      for (const block of shared) {
        expect(after.refCounts[block]).toBe(0);
        expect(after.hashed[block]).toBe(true);
      }
      expect(result.afterStates.cached).toBe(after.stats.blocks.cached);
    } finally {
      await page.close();
    }
  }, 180_000);

  it('structured output: a json_schema answer, streamed and whole, parses and fits its schema; a schema XGrammar refuses is INVALID_REQUEST naming response_format', async () => {
    const { page } = await openEngine(browser, '/plain/');
    try {
      const result = await page.evaluate(async () => {
        const schema = {
          type: 'object',
          properties: {
            color: { type: 'string', enum: ['red', 'green', 'blue'] },
            ok: { type: 'boolean' },
          },
          required: ['color', 'ok'],
          additionalProperties: false,
        };
        const body = {
          messages: [{ role: 'user' as const, content: 'Pick a color as JSON' }],
          response_format: { type: 'json_schema' as const, json_schema: { name: 'pick', schema } },
          max_tokens: 64,
          temperature: 0,
        };
        const whole = await engine.chat.completions.create(body);
        const stream = await engine.chat.completions.create({ ...body, stream: true });
        let streamed = '';
        let streamFinish: string | null = null;
        for await (const c of stream) {
          streamed += c.choices[0]?.delta.content ?? '';
          streamFinish = c.choices[0]?.finish_reason ?? streamFinish;
        }
        const refused = await engine.chat.completions
          .create({
            ...body,
            response_format: {
              type: 'json_schema',
              json_schema: {
                name: 'bad',
                schema: { type: 'object', properties: { a: { type: 'nonsense' } } },
              },
            },
          })
          .then(
            () => undefined,
            (e: Kvasir.WebEngineError) => ({ name: e.name, code: e.code, details: e.details }),
          );
        const stats = await engine.stats();
        return {
          text: whole.choices[0]!.message.content,
          finish: whole.choices[0]!.finish_reason,
          streamed,
          streamFinish,
          refused,
          used: stats.blocks.used,
        };
      });
      expect(result.finish).toBe('stop');
      const answer = JSON.parse(result.text!) as Record<string, unknown>;
      expect(Object.keys(answer).sort()).toEqual(['color', 'ok']);
      expect(['red', 'green', 'blue']).toContain(answer.color);
      expect(typeof answer.ok).toBe('boolean');
      expect(result.streamed).toBe(result.text);
      expect(result.streamFinish).toBe('stop');
      expect(result.refused).toMatchObject({ code: 'INVALID_REQUEST' });
      expect(JSON.stringify(result.refused)).toMatch(/response_format/);
      expect(result.used).toBe(0);
    } finally {
      await page.close();
    }
  }, 180_000);

  it('keeps the model in Cache Storage: a reload downloads nothing; a truncated entry is fetched again', async () => {
    const context = await browser.newContext();
    try {
      const before = site.modelRequests();
      const first = await openEngine(context, '/coi/');
      expect(first.model.fromCache).toBe(false);
      expect(site.modelRequests()).toBe(before + 1);
      await first.page.reload();
      const second = await loadEngine(first.page, {});
      expect(second.model.fromCache).toBe(true);
      expect(site.modelRequests()).toBe(before + 1);
      // Cut the cached copy in half, keeping its recorded size: the next load refetches it.
      await first.page.evaluate(async () => {
        await engine.dispose();
        const cache = await caches.open('kvasir-models');
        const [key] = await cache.keys();
        const hit = await cache.match(key!);
        const bytes = new Uint8Array(await hit!.arrayBuffer());
        await cache.put(
          key!,
          new Response(bytes.slice(0, bytes.length >> 1), { headers: hit!.headers }),
        );
      });
      await first.page.reload();
      const third = await loadEngine(first.page, {});
      expect(third.model.fromCache).toBe(false);
      expect(site.modelRequests()).toBe(before + 2);
      const answer = await first.page.evaluate(() =>
        engine.completions.create({
          prompt: 'still works',
          max_tokens: 4,
          temperature: 0,
          ignore_eos: true,
        }),
      );
      expect(answer.usage.completion_tokens).toBe(4);
    } finally {
      await context.close();
    }
  }, 180_000);

  it('without cross-origin isolation and without WebGPU runs the wasm kernels on one thread, says why, and gives the threaded greedy tokens', async () => {
    const plain = await launchChromium({ webgpu: false });
    try {
      const chat = () =>
        engine.chat.completions.create({
          messages: [{ role: 'user', content: 'Hello from a browser' }],
          max_tokens: 16,
          temperature: 0,
          ignore_eos: true,
        });
      const single = await openEngine(plain, '/plain/');
      expect(single.backend).toMatchObject({ backend: 'wasm', threads: 1 });
      expect(single.backend.reason).toMatch(
        /^no WebGPU adapter; WebAssembly SIMD128 with 1 thread/,
      );
      expect(single.backend.reason).toMatch(/not cross-origin isolated/);
      const isolated = await single.page.evaluate(() => globalThis.crossOriginIsolated);
      expect(isolated).toBe(false);
      const one = await single.page.evaluate(chat);
      expect(one.usage.completion_tokens).toBe(16);
      const threaded = await openEngine(plain, '/coi/');
      expect(threaded.backend).toMatchObject({ backend: 'wasm', threads: 2 });
      const two = await threaded.page.evaluate(chat);
      expect(one.choices[0]!.message.content?.length).toBeGreaterThan(0);
      expect(one.choices[0]!.message.content).toBe(two.choices[0]!.message.content);
      expect(one.usage).toEqual(two.usage);
      // A backend the page cannot run is a typed error naming what it lacks.
      const refused = await single.page.evaluate(() =>
        kvasir.createEngine({ model: 'tiny.gguf', worker: 'worker.js', backend: 'webgpu' }).then(
          () => 'loaded',
          (e: Kvasir.WebEngineError) => `${e.code}: ${e.message}`,
        ),
      );
      expect(refused).toMatch(/^BACKEND: webgpu: this page has no WebGPU adapter/);
    } finally {
      await plain.close();
    }
  }, 180_000);

  it('gives the greedy tokens `kvasir serve` gives on the same model and backend', async () => {
    const cli = join(
      dirname(createRequire(import.meta.url).resolve('kvasir/package.json')),
      'dist',
      'cli.js',
    );
    const gguf = join(root, 'tiny.gguf');
    const serve: ChildProcess = spawn(
      process.execPath,
      [cli, 'serve', '--port', '0', '--model', gguf, '--backend', 'wasm', '--threads', '2'],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    try {
      const url = await new Promise<string>((resolve, reject) => {
        let out = '';
        serve.stdout!.on('data', (chunk: Buffer) => {
          out += chunk.toString();
          const m = /Kvasir is listening on (http:\/\/\S+)/.exec(out);
          if (m) resolve(m[1]!);
        });
        serve.stderr!.on('data', (chunk: Buffer) => (out += chunk.toString()));
        serve.on('exit', (code) => reject(new Error(`kvasir serve exited (${code}):\n${out}`)));
      });
      const body = {
        prompt: 'Hello from a browser',
        max_tokens: 16,
        temperature: 0,
        ignore_eos: true,
        logprobs: 0,
      };
      const response = await fetch(`${url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'tiny', ...body }),
      });
      const served = (await response.json()) as {
        choices: { text: string }[];
        usage: { prompt_tokens: number };
      };
      const { page } = await openEngine(browser, '/coi/');
      try {
        const inPage = await page.evaluate(
          (b) =>
            engine.completions.create({
              prompt: b.prompt,
              max_tokens: b.max_tokens,
              temperature: 0,
              ignore_eos: true,
            }),
          body,
        );
        expect(served.choices[0]!.text.length).toBeGreaterThan(0);
        expect(inPage.usage.prompt_tokens).toBe(served.usage.prompt_tokens);
        expect(inPage.choices[0]!.text).toBe(served.choices[0]!.text);
      } finally {
        await page.close();
      }
    } finally {
      serve.kill('SIGTERM');
    }
  }, 180_000);
});
