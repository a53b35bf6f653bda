// @kvasir/web's benchmark in headless chromium, printing one JSON object:
// - aggregate tokens/s of 1, 4 and 8 concurrent completions in one page (one engine), and one
//   streamed request's decode tokens/s (the tokens after the first over the time after it);
// - time to first token of a request whose prompt starts with a long system prompt: cold (a
//   fresh origin), cached in memory (a second request), and after a reload from the OPFS tier;
// - beside them, where it loads, wllama (llama.cpp in WebAssembly, from npm) on the same GGUF in
//   the same page setup: one request's decode tokens/s, measured the same way, and its cold TTFT.
// Rounds alternate the cases (A B A B, then the other order), on a cross-origin isolated page
// with 2 wasm threads for both engines.
//
//   pnpm --filter @kvasir/web bench [--gguf model.gguf] [--rounds 3] [--tokens 32] [--no-wllama]
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { loadavg } from 'node:os';
import type { Page } from 'playwright-core';
import type * as Kvasir from '../src/index.js';
import { bundle, launchChromium, startSite } from '../test/browser-harness.js';
import { benchModel } from './bench-model.js';

declare const kvasir: typeof Kvasir;
declare const engine: Kvasir.WebEngine;

const arg = (name: string) => {
  const i = process.argv.indexOf(name);
  return i < 0 ? undefined : process.argv[i + 1];
};
const ROUNDS = Number(arg('--rounds') ?? 3);
const TOKENS = Number(arg('--tokens') ?? 32);
const THREADS = 2;
const CHATS = [1, 4, 8] as const;
const SYSTEM =
  'You are the reference desk of a public library. Patrons ask where books are, when the ' +
  'building opens and how to borrow. Answer in one short sentence, name the shelf or the desk, ' +
  'and never invent a title that the catalogue does not list. Opening hours are nine to five on ' +
  'weekdays and ten to two on Saturdays; the library is closed on Sundays and public holidays. ' +
  'Atlases are on shelf M, dictionaries on shelf D, local history in the reading room upstairs.';

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[s.length >> 1]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};
const round3 = (x: number) => Math.round(x * 1000) / 1000;

async function loadKvasir(page: Page, navigate: boolean): Promise<void> {
  if (navigate) await page.goto(`${site.origin}/coi/`);
  await page.waitForFunction(() => 'kvasir' in globalThis);
  await page.evaluate(async (threads) => {
    const e = await kvasir.createEngine({
      model: 'tiny.gguf',
      worker: 'worker.js',
      threads,
      opfs: true,
      kvCacheBytes: 256 * 2 ** 20,
    });
    (globalThis as unknown as { engine: Kvasir.WebEngine }).engine = e;
  }, THREADS);
}

/** Tokens/s of `n` concurrent greedy completions of `TOKENS` tokens (distinct prompts). */
function aggregate(page: Page, n: number, round: number): Promise<number> {
  return page.evaluate(
    async ({ n, tokens, round }) => {
      const t0 = performance.now();
      const answers = await Promise.all(
        Array.from({ length: n }, (_, i) =>
          engine.completions.create({
            prompt: `Request ${round}.${i}: list the rivers of the north, one per line.`,
            max_tokens: tokens,
            temperature: 0,
            ignore_eos: true,
          }),
        ),
      );
      const s = (performance.now() - t0) / 1000;
      return answers.reduce((a, r) => a + r.usage.completion_tokens, 0) / s;
    },
    { n, tokens: TOKENS, round },
  );
}

/**
 * One streamed request's decode tokens/s, measured as wllama's below: the tokens after the
 * first over the time after the first (the prompt's prefill left out).
 */
function decodeRate(page: Page, round: number): Promise<number> {
  return page.evaluate(
    async ({ tokens, round }) => {
      const t0 = performance.now();
      const stream = await engine.completions.create({
        prompt: `Request ${round}: list the rivers of the north.`,
        max_tokens: tokens,
        temperature: 0,
        ignore_eos: true,
        stream: true,
        stream_options: { include_usage: true },
      });
      let first = -1;
      let n = 0;
      for await (const c of stream) {
        if (first < 0 && c.choices.length > 0) first = performance.now() - t0;
        if (c.usage) n = c.usage.completion_tokens;
      }
      return (n - 1) / ((performance.now() - t0 - first) / 1000);
    },
    { tokens: TOKENS, round },
  );
}

/** Milliseconds to the first streamed token of a completion after the system prompt. */
function ttft(page: Page, question: string): Promise<{ ms: number; cached: number }> {
  return page.evaluate(
    async ({ system, question }) => {
      const t0 = performance.now();
      const stream = await engine.completions.create({
        prompt: `${system}\n\nPatron: ${question}\nLibrarian:`,
        max_tokens: 4,
        temperature: 0,
        ignore_eos: true,
        stream: true,
        stream_options: { include_usage: true },
      });
      let ms = -1;
      let cached = 0;
      for await (const c of stream) {
        if (ms < 0 && c.choices.length > 0) ms = performance.now() - t0;
        if (c.usage) cached = c.usage.prompt_tokens_details.cached_tokens;
      }
      return { ms, cached };
    },
    { system: SYSTEM, question },
  );
}

/** Waits for the prompt's blocks to reach OPFS, then disposes the engine. */
async function flushAndDispose(page: Page): Promise<void> {
  await page.evaluate(async () => {
    let s = await engine.stats();
    for (let i = 0; i < 400 && (s.opfs?.prefix.storedBlocks ?? 0) === 0; i++) {
      await new Promise((r) => setTimeout(r, 25));
      s = await engine.stats();
    }
    await engine.dispose();
  });
}

/** wllama in a fresh page: one request's decode tokens/s and its cold TTFT, or why it failed. */
async function wllama(round: number) {
  const context = await browser.newContext();
  try {
    const page = await context.newPage();
    // tsx names the functions it compiles with an `__name` helper, which a function sent to the
    // page through page.evaluate does not carry.
    await page.addInitScript('globalThis.__name = (f) => f');
    await page.goto(`${site.origin}/coi/`);
    await page.addScriptTag({ url: `${site.origin}/coi/wllama-page.js`, type: 'module' });
    await page.waitForFunction(() => 'Wllama' in globalThis);
    return await page.evaluate(
      async ({ system, tokens, threads, round }) => {
        type W = {
          loadModelFromUrl(url: string, o: object): Promise<void>;
          createCompletion(o: object): Promise<AsyncIterable<{ choices: { text: string }[] }>>;
          exit(): Promise<void>;
        };
        const Ctor = (globalThis as unknown as { Wllama: new (p: object, c?: object) => W }).Wllama;
        const w = new Ctor(
          { default: new URL('wllama.wasm', location.href).href },
          { logger: { debug() {}, log() {}, info() {}, warn() {}, error: console.error } },
        );
        await w.loadModelFromUrl(new URL('tiny.gguf', location.href).href, {
          n_threads: threads,
          n_ctx: 1024,
          n_batch: 512,
          useCache: false,
        });
        const run = async (prompt: string, max: number) => {
          const t0 = performance.now();
          let first = -1;
          let n = 0;
          const stream = await w.createCompletion({
            prompt,
            max_tokens: max,
            temp: 0,
            temperature: 0,
            stream: true,
          });
          for await (const _ of stream) {
            if (first < 0) first = performance.now() - t0;
            n++;
          }
          return { first, n, ms: performance.now() - t0 };
        };
        const cold = await run(`${system}\n\nPatron: Where are the atlases?\nLibrarian:`, 4);
        const decode = await run(`Request ${round}: list the rivers of the north.`, tokens);
        await w.exit();
        return {
          ttftColdMs: cold.first,
          tokensPerS: (decode.n - 1) / ((decode.ms - decode.first) / 1000),
        };
      },
      { system: SYSTEM, tokens: TOKENS, threads: THREADS, round },
    );
  } catch (error) {
    return { error: (error as Error).message.split('\n')[0] };
  } finally {
    await context.close();
  }
}

const model = await benchModel(arg('--gguf'));
const wllamaDir = createRequire(import.meta.url).resolve('@wllama/wllama/esm/index.js');
const site = await startSite(model.bytes, {
  '/wllama-page.js': new TextEncoder().encode(await bundle('../bench/wllama-page.ts')),
  '/wllama.wasm': new Uint8Array(
    await readFile(wllamaDir.replace(/index\.js$/, 'wasm/wllama.wasm')),
  ),
});
const browser = await launchChromium({ webgpu: false });
const loadBefore = loadavg();
const agg: Record<number, number[]> = { 1: [], 4: [], 8: [] };
const decodes: number[] = [];
const ttfts = { cold: [] as number[], memory: [] as number[], opfs: [] as number[] };
const cachedTokens = { memory: [] as number[], opfs: [] as number[] };
const peer: Record<string, unknown>[] = [];
try {
  for (let r = 0; r < ROUNDS; r++) {
    // A fresh origin (no OPFS, no prefix cache): cold, then in memory, then after a reload.
    const context = await browser.newContext();
    const page = await context.newPage();
    await loadKvasir(page, true);
    const order = r % 2 === 0 ? CHATS : [...CHATS].reverse();
    for (const n of order) agg[n]!.push(await aggregate(page, n, r));
    decodes.push(await decodeRate(page, r));
    const cold = await ttft(page, 'Where are the atlases?');
    const memory = await ttft(page, 'When do you open on Saturday?');
    await flushAndDispose(page);
    await page.reload();
    await loadKvasir(page, false);
    const opfs = await ttft(page, 'Where is local history?');
    await page.evaluate(() => engine.dispose());
    await context.close();
    ttfts.cold.push(cold.ms);
    ttfts.memory.push(memory.ms);
    ttfts.opfs.push(opfs.ms);
    cachedTokens.memory.push(memory.cached);
    cachedTokens.opfs.push(opfs.cached);
    if (!process.argv.includes('--no-wllama')) peer.push(await wllama(r));
  }
} finally {
  await browser.close();
  await site.close();
}
const med = (xs: number[]) => round3(median(xs));
const peerOk = peer.filter((p) => !('error' in p)) as { ttftColdMs: number; tokensPerS: number }[];
console.log(
  JSON.stringify(
    {
      model: model.name,
      threads: THREADS,
      tokens: TOKENS,
      rounds: ROUNDS,
      loadavg: { before: loadBefore.map(round3), after: loadavg().map(round3) },
      aggregateTokensPerS: Object.fromEntries(CHATS.map((n) => [n, agg[n]!.map(round3)])),
      aggregateMedian: Object.fromEntries(CHATS.map((n) => [n, med(agg[n]!)])),
      batchingGain: { '4v1': med(agg[4]!) / med(agg[1]!), '8v1': med(agg[8]!) / med(agg[1]!) },
      decodeTokensPerS1: decodes.map(round3),
      ttftMs: Object.fromEntries(Object.entries(ttfts).map(([k, v]) => [k, v.map(round3)])),
      ttftMedianMs: Object.fromEntries(Object.entries(ttfts).map(([k, v]) => [k, med(v)])),
      ttftColdOver: {
        memory: med(ttfts.cold) / med(ttfts.memory),
        opfs: med(ttfts.cold) / med(ttfts.opfs),
      },
      cachedTokens,
      wllama:
        peerOk.length > 0
          ? {
              tokensPerS: peerOk.map((p) => round3(p.tokensPerS)),
              ttftColdMs: peerOk.map((p) => round3(p.ttftColdMs)),
              kvasirOverWllama: {
                decodeTokensPerS1: med(decodes) / median(peerOk.map((p) => p.tokensPerS)),
                ttftCold: median(peerOk.map((p) => p.ttftColdMs)) / med(ttfts.cold),
              },
            }
          : { error: peer[0]?.error ?? 'not run (--no-wllama)' },
    },
    null,
    2,
  ),
);
