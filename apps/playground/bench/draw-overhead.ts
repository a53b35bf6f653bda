// What drawing the KV cache costs the chats: aggregate decode tokens/s of 3 concurrent chats
// (ignore_eos, greedy) in the built playground in headless Chromium, without drawing (A) and
// with the page's snapshot + redraw every 100 ms (B), alternating A B A B in one window.
// Prints JSON: each round's tokens/s, the B/A ratio of each pair, and the load average.
// Run: pnpm --filter playground bench   (or: pnpm --filter playground exec tsx bench/draw-overhead.ts --rounds 4 --tokens 128)
import { mkdtemp, rm } from 'node:fs/promises';
import { loadavg, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { launchChromium } from '@kvasir/test-utils/chromium';
import type { WebEngine } from '@kvasir/web';
import { build } from 'vite';
import { serveStatic } from '../test/static-site.js';

declare const playground: { ready: Promise<void>; engine: WebEngine; refresh(): Promise<unknown> };

const app = join(dirname(fileURLToPath(import.meta.url)), '..');
const arg = (name: string, fallback: number) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? Number(process.argv[i + 1]) : fallback;
};
const ROUNDS = arg('rounds', 4);
const TOKENS = arg('tokens', 128);

const out = await mkdtemp(join(tmpdir(), 'kvasir-playground-bench-'));
await build({ root: app, logLevel: 'error', build: { outDir: out, emptyOutDir: true } });
const site = await serveStatic(out);
const browser = await launchChromium({ webgpu: false });
try {
  const page = await browser.newPage();
  await page.goto(`${site.origin}/?opfs=0`);
  await page.waitForFunction(() => 'playground' in globalThis);
  await page.evaluate(() => playground.ready);
  const round = (draw: boolean) =>
    page.evaluate(
      async ({ draw, tokens }) => {
        let drawing = true;
        let frames = 0;
        const drawer = (async () => {
          while (draw && drawing) {
            await playground.refresh();
            frames++;
            await new Promise((r) => setTimeout(r, 100));
          }
        })();
        const t0 = performance.now();
        const answers = await Promise.all(
          [0, 1, 2].map((i) =>
            playground.engine.chat.completions.create({
              messages: [{ role: 'user', content: `chat ${i}: tell me about the sea` }],
              max_tokens: tokens,
              temperature: 0,
              ignore_eos: true,
            }),
          ),
        );
        const seconds = (performance.now() - t0) / 1000;
        drawing = false;
        await drawer;
        const n = answers.reduce((a, r) => a + r.usage.completion_tokens, 0);
        return { tokensPerSecond: n / seconds, frames };
      },
      { draw, tokens: TOKENS },
    );
  await round(false); // warm-up
  const a: number[] = [];
  const b: number[] = [];
  let frames = 0;
  for (let i = 0; i < ROUNDS; i++) {
    a.push((await round(false)).tokensPerSecond);
    const r = await round(true);
    b.push(r.tokensPerSecond);
    frames += r.frames;
  }
  const ratios = a.map((x, i) => b[i]! / x);
  const sorted = [...ratios].sort((x, y) => x - y);
  console.log(
    JSON.stringify({
      bench: 'playground draw overhead',
      chats: 3,
      tokensPerChat: TOKENS,
      rounds: ROUNDS,
      withoutDrawing: a.map((x) => +x.toFixed(1)),
      withDrawing: b.map((x) => +x.toFixed(1)),
      ratios: ratios.map((x) => +x.toFixed(3)),
      medianRatio: +sorted[Math.floor(sorted.length / 2)]!.toFixed(3),
      framesDrawn: frames,
      loadavg: loadavg().map((x) => +x.toFixed(2)),
    }),
  );
} finally {
  await browser.close();
  await site.close();
  await rm(out, { recursive: true, force: true });
}
