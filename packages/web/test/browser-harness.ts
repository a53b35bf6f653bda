// A loopback server for the browser tests: the page, its bundled script and worker, and the
// model, with or without cross-origin isolation, counting the model's downloads.
import { readFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { makeModelConfig, writeRandomCheckpoint } from '@kvasir/model';
import { convertToGguf } from '@kvasir/model/formats';
import { build } from 'esbuild';
import type { Browser, Page } from 'playwright-core';
import { xgrammarBundle } from '../build/xgrammar-bundle.js';

/** The tiny random model the browser tests serve. */
export const TINY_CONFIG = makeModelConfig({
  hiddenSize: 64,
  intermediateSize: 128,
  numLayers: 2,
  numHeads: 4,
  numKvHeads: 2,
  vocabSize: 512,
});

/**
 * Writes the tiny model as `<root>/tiny.gguf` (Q8_0, from a seeded checkpoint) and returns its
 * bytes. With `chatTemplate` (one of `tooling/ggml-fixtures/chat-templates.json`'s) it carries
 * that template and a context of 4,096 tokens (templates that list tools are long).
 */
export async function writeTinyGguf(
  root: string,
  seed = 31,
  chatTemplate?: string,
): Promise<Uint8Array> {
  const config =
    chatTemplate === undefined ? TINY_CONFIG : { ...TINY_CONFIG, maxPositionEmbeddings: 4096 };
  await writeRandomCheckpoint(join(root, 'hf'), config, seed);
  await convertToGguf(join(root, 'hf'), join(root, 'tiny.gguf'), {
    dtype: 'Q8_0',
    ...(chatTemplate === undefined
      ? {}
      : { metadata: { 'tokenizer.chat_template': chatTemplate } }),
  });
  return new Uint8Array(await readFile(join(root, 'tiny.gguf')));
}

/** `entry` (relative to this file) bundled for the browser as one ES module. */
export async function bundle(entry: string): Promise<string> {
  const out = await build({
    entryPoints: [fileURLToPath(new URL(entry, import.meta.url))],
    bundle: true,
    format: 'esm',
    platform: 'browser',
    write: false,
    plugins: [xgrammarBundle()],
    // The model's `browser` field disables its Node-only modules; esbuild warns about them.
    logLevel: 'error',
  });
  return out.outputFiles[0]!.text;
}

/** The served site: `/coi/` pages are cross-origin isolated, `/plain/` pages are not. */
export interface TestSite {
  readonly origin: string;
  /** GETs of the model so far. */
  modelRequests(): number;
  close(): Promise<void>;
}

const contentType = (path: string) =>
  path.endsWith('.js')
    ? 'text/javascript'
    : path.endsWith('.wasm')
      ? 'application/wasm'
      : 'application/octet-stream';

/** Serves `model` as `/tiny.gguf`, and each of `more` at its path (other models, scripts). */
export async function startSite(
  model: Uint8Array,
  more: Readonly<Record<string, Uint8Array>> = {},
): Promise<TestSite> {
  const [pageJs, workerJs] = await Promise.all([
    bundle('./browser/page.ts'),
    bundle('../src/worker.ts'),
  ]);
  let modelRequests = 0;
  const html = '<!doctype html><meta charset="utf-8"><script type="module" src="page.js"></script>';
  const server: Server = createServer((req, res) => {
    const url = req.url ?? '';
    const isolated = url.startsWith('/coi/');
    const headers: Record<string, string> = isolated
      ? {
          'Cross-Origin-Opener-Policy': 'same-origin',
          'Cross-Origin-Embedder-Policy': 'require-corp',
        }
      : {};
    const path = url.replace(/^\/(coi|plain)\//, '/');
    const routes: Record<string, [string, Uint8Array]> = {
      '/': ['text/html', Buffer.from(html)],
      '/page.js': ['text/javascript', Buffer.from(pageJs)],
      '/worker.js': ['text/javascript', Buffer.from(workerJs)],
      '/tiny.gguf': ['application/octet-stream', model],
      ...Object.fromEntries(Object.entries(more).map(([p, bytes]) => [p, [contentType(p), bytes]])),
    };
    const route = routes[path];
    if (!route) {
      res.writeHead(404, headers).end();
      return;
    }
    if (path === '/tiny.gguf') modelRequests++;
    res
      .writeHead(200, {
        ...headers,
        'Content-Type': route[0],
        'Content-Length': String(route[1].byteLength),
      })
      .end(route[1]);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('no server address');
  return {
    origin: `http://127.0.0.1:${address.port}`,
    modelRequests: () => modelRequests,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

/**
 * A new cross-origin isolated page of `site` with an engine loaded per entry of `engines`, on
 * the page's globals under the entry's name (`{ engine: 'tiny.gguf' }` → `window.engine`), on 2
 * wasm threads. A load that fails throws with what the page logged.
 */
export async function pageWithEngines(
  browser: Browser,
  site: TestSite,
  engines: Readonly<Record<string, string>>,
): Promise<Page> {
  const page = await browser.newPage();
  const logs: string[] = [];
  page.on('console', (m) => logs.push(m.text()));
  page.on('pageerror', (e) => logs.push(e.message));
  await page.goto(`${site.origin}/coi/`);
  await page.waitForFunction(() => 'kvasir' in globalThis);
  await page
    .evaluate(async (models) => {
      const { createEngine } = (
        globalThis as unknown as { kvasir: typeof import('../src/index.js') }
      ).kvasir;
      for (const [name, model] of Object.entries(models)) {
        const engine = await createEngine({ model, worker: 'worker.js', threads: 2 });
        Object.assign(globalThis, { [name]: engine });
      }
    }, engines)
    .catch((error: Error) => {
      throw new Error(`${error.message}\n${logs.join('\n')}`);
    });
  return page;
}

export { launchChromium } from '@kvasir/test-utils/chromium';
