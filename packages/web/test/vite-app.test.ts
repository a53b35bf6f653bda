// The README's quick start, as a web developer runs it: a Vite app that imports @kvasir/web
// (this package's built dist), `vite build`, `vite preview` with the isolation headers, and a
// page that chats in headless chromium. Needs `pnpm build` of this package first.
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Browser } from 'playwright-core';
import { build, preview } from 'vite';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { launchChromium, writeTinyGguf } from './browser-harness.js';

const DIST = fileURLToPath(new URL('../dist/index.js', import.meta.url));
const isolation = {
  'Cross-Origin-Opener-Policy': 'same-origin',
  'Cross-Origin-Embedder-Policy': 'require-corp',
};

let root: string;
let browser: Browser;

beforeAll(async () => {
  if (!existsSync(DIST)) throw new Error(`${DIST} is missing: run pnpm build in packages/web`);
  root = await mkdtemp(join(tmpdir(), 'kvasir-vite-'));
  await mkdir(join(root, 'public'));
  await writeFile(join(root, 'public', 'model.gguf'), await writeTinyGguf(join(root, 'gen')));
  await writeFile(
    join(root, 'index.html'),
    '<!doctype html><meta charset="utf-8"><pre id="app"></pre><script type="module" src="/main.ts"></script>',
  );
  await writeFile(
    join(root, 'main.ts'),
    `import { createEngine } from '@kvasir/web';
const engine = await createEngine({ model: '/model.gguf' });
const r = await engine.chat.completions.create({
  messages: [{ role: 'user', content: 'Hello!' }], max_tokens: 8, temperature: 0, ignore_eos: true,
});
const schema = { type: 'object', properties: { c: { enum: ['a', 'b'] } }, required: ['c'], additionalProperties: false };
const j = await engine.chat.completions.create({
  messages: [{ role: 'user', content: 'JSON please' }], max_tokens: 32, temperature: 0,
  response_format: { type: 'json_schema', json_schema: { name: 'c', schema } },
});
document.querySelector('#app').textContent = JSON.stringify({
  backend: engine.backend, usage: r.usage, json: j.choices[0].message.content, jsonFinish: j.choices[0].finish_reason,
});
`,
  );
  browser = await launchChromium({ webgpu: false });
}, 120_000);

afterAll(async () => {
  await browser?.close();
  if (root) await rm(root, { recursive: true, force: true });
});

describe('a Vite app with @kvasir/web', () => {
  it('builds (the worker bundled as its own chunk) and chats on wasm threads behind the isolation headers, with structured output', async () => {
    const config = {
      root,
      logLevel: 'silent' as const,
      resolve: { alias: { '@kvasir/web': DIST } },
      preview: { headers: isolation, port: 0 },
      worker: { format: 'es' as const },
      build: { target: 'es2022', outDir: join(root, 'dist') },
    };
    await build(config);
    const server = await preview(config);
    try {
      const page = await browser.newPage();
      const errors: string[] = [];
      page.on('pageerror', (e) => errors.push(e.message));
      await page.goto(server.resolvedUrls!.local[0]!);
      await page
        .waitForFunction(() => document.querySelector('#app')?.textContent, null, {
          timeout: 120_000,
        })
        .catch(() => {
          throw new Error(`the page did not answer: ${errors.join('; ')}`);
        });
      const shown = JSON.parse((await page.textContent('#app')) ?? '{}');
      expect(shown.backend.backend).toBe('wasm');
      // Threaded: the headers made the page cross-origin isolated.
      expect(shown.backend.reason).toMatch(/\(cross-origin isolated\)$/);
      expect(shown.usage.completion_tokens).toBe(8);
      // Structured output: XGrammar's chunk, imported by the worker on demand, came with the app.
      expect(shown.jsonFinish).toBe('stop');
      expect(['a', 'b']).toContain(JSON.parse(shown.json).c);
    } finally {
      await server.close();
    }
  }, 240_000);
});
