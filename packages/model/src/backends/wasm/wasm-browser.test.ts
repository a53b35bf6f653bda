// The wasm backend's portability, tested: its one module runs in a real browser
// (Debian's chromium, headless through playwright-core) and gives the logits it gives in Node.
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';
import { chromium } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { convertToGguf } from '../../formats/gguf/convert.js';
import { openGgufBytes } from '../../formats/gguf/reader.js';
import { writeRandomCheckpoint } from '../../formats/random-checkpoint.js';
import { DECODE_STEPS, runTinySteps, TINY_CONFIG } from '../../testing/browser/tiny-steps.js';
import { ggmlKernelCaseBits } from '../../testing/ggml-harness.js';
import { createWasmRuntime } from './wasm-runtime.js';

const CHROMIUM = '/usr/bin/chromium';
// ARCHITECTURE.md's flags ("Where the system runs").
const CHROMIUM_ARGS = [
  '--headless=new',
  '--no-sandbox',
  '--enable-unsafe-webgpu',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--no-first-run',
];
const THREADS = 2;
const WORKER_ENTRY = fileURLToPath(
  new URL('../../testing/browser/wasm-worker.ts', import.meta.url),
);

// Shared wasm memory (SharedArrayBuffer) exists only in a cross-origin isolated page.
const ISOLATION_HEADERS = {
  'Cross-Origin-Opener-Policy': 'same-origin',
  'Cross-Origin-Embedder-Policy': 'require-corp',
};

const PAGE = `<!doctype html>
<script type="module">
  const worker = new Worker('/worker.js', { type: 'module' });
  window.result = new Promise((resolve) => {
    worker.onmessage = (e) => resolve({ ...e.data, pageIsolated: self.crossOriginIsolated });
    worker.onerror = (e) => resolve({ ok: false, error: 'worker error: ' + e.message });
  });
  worker.postMessage({ modelUrl: '/tiny.gguf', threads: ${THREADS} });
</script>`;

interface PageResult {
  ok: boolean;
  error?: string;
  promptIds: number[];
  logitsBits: number[][];
  tokens: number[];
  text: string;
  workersStarted: number;
  pathError?: { code?: string; message: string };
  crossOriginIsolated: boolean;
  pageIsolated: boolean;
  features: { simd128: boolean; relaxedSimd: boolean; threads: boolean };
  kernelBits: { relaxed: number[][]; plain: number[][] };
}

let root: string;
let gguf: Uint8Array;
let workerJs: string;
let server: Server;
let origin: string;

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'kvasir-wasm-browser-'));
  await writeRandomCheckpoint(join(root, 'hf'), TINY_CONFIG, 18);
  await convertToGguf(join(root, 'hf'), join(root, 'tiny.gguf'), { dtype: 'Q8_0' });
  gguf = new Uint8Array(await readFile(join(root, 'tiny.gguf')));
  const bundle = await build({
    entryPoints: [WORKER_ENTRY],
    bundle: true,
    format: 'esm',
    platform: 'browser',
    write: false,
    // The package.json `browser` field disables the Node-only modules (files, worker_threads,
    // the terminal progress bar); esbuild warns that their imports are undefined, which the
    // browser path never calls.
    logLevel: 'error',
  });
  workerJs = bundle.outputFiles[0]!.text;
  server = createServer((req, res) => {
    const routes: Record<string, [string, string | Uint8Array]> = {
      '/': ['text/html', PAGE],
      '/worker.js': ['text/javascript', workerJs],
      '/tiny.gguf': ['application/octet-stream', gguf],
    };
    const route = routes[req.url ?? ''];
    if (!route) {
      res.writeHead(404, ISOLATION_HEADERS).end();
      return;
    }
    res.writeHead(200, { ...ISOLATION_HEADERS, 'Content-Type': route[0] }).end(route[1]);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('no server address');
  origin = `http://127.0.0.1:${address.port}`;
}, 60_000);

afterAll(async () => {
  // A beforeAll that failed before listening leaves no server: closing it would never resolve.
  if (server?.listening) await new Promise((resolve) => server.close(resolve));
  await rm(root, { recursive: true, force: true });
});

async function runInChromium(): Promise<PageResult> {
  if (!existsSync(CHROMIUM)) {
    throw new Error(
      `${CHROMIUM} is missing: run tooling/scripts/setup.sh as root (it installs Debian's chromium), or apt-get install -y chromium`,
    );
  }
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS });
  try {
    const page = await browser.newPage();
    const console: string[] = [];
    page.on('console', (m) => console.push(m.text()));
    page.on('pageerror', (e) => console.push(e.message));
    await page.goto(`${origin}/`);
    const result = (await page.evaluate('window.result')) as PageResult;
    if (!result.ok) throw new Error(`in chromium: ${result.error}\n${console.join('\n')}`);
    return result;
  } finally {
    await browser.close();
  }
}

describe('wasm backend in chromium', () => {
  it('runs a GGUF from bytes (tokenizer, chat template, 2 threads, SIMD), giving Node’s logits bit for bit; both kernel builds give Node’s GGML results bit for bit', async () => {
    const [inBrowser, inNode, nodeKernelBits] = await Promise.all([
      runInChromium(),
      openGgufBytes(gguf).then(async (reader) => {
        try {
          return await runTinySteps(reader, THREADS);
        } finally {
          await reader.close();
        }
      }),
      createWasmRuntime({ threads: THREADS, reserveBytes: 16 << 20, build: 'plain' }).then(
        async (rt) => {
          try {
            return ggmlKernelCaseBits(rt);
          } finally {
            await rt.close();
          }
        },
      ),
    ]);
    expect(inBrowser.pageIsolated).toBe(true);
    expect(inBrowser.crossOriginIsolated).toBe(true);
    expect(inBrowser.features.simd128).toBe(true);
    expect(inBrowser.features.threads).toBe(true);
    // Chromium's relaxed SIMD passes the int8 dot probe: the model ran the relaxed build there
    // (and the plain one in Node on Node 20), and every GGML type's kernels, relaxed and plain,
    // give there the bits the plain build gives in Node.
    expect(inBrowser.features.relaxedSimd).toBe(true);
    expect(inBrowser.kernelBits.relaxed).toHaveLength(33);
    expect(inBrowser.kernelBits.relaxed).toEqual(nodeKernelBits);
    expect(inBrowser.kernelBits.plain).toEqual(nodeKernelBits);
    // Thread 0 is the model's own Worker; the pool starts the others.
    expect(inBrowser.workersStarted).toBe(THREADS - 1);
    expect(inBrowser.logitsBits).toHaveLength(DECODE_STEPS + 1);
    expect(inBrowser.logitsBits[0]).toHaveLength(TINY_CONFIG.vocabSize);
    // The GGUF's tokenizer and chat template (jinja) run there too.
    expect(inBrowser.promptIds.length).toBeGreaterThan(10);
    expect(inBrowser.promptIds).toEqual(inNode.promptIds);
    expect(inBrowser.tokens).toEqual(inNode.tokens);
    expect(inBrowser.text).toBe(inNode.text);
    // The same module and the same split of rows among threads: the same bits, not a tolerance.
    expect(inBrowser.logitsBits).toEqual(inNode.logitsBits);
    expect(inBrowser.pathError?.code).toBe('IO');
    expect(inBrowser.pathError?.message).toContain('openGgufBytes');
  }, 60_000);
});
