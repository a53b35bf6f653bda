// The wasm backend's portability, tested: its one module runs in a real browser
// (Debian's chromium, headless through playwright-core) and gives the logits it gives in Node.
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { GGML_BLOCK_FORMATS } from '@kvasir/quantizer/ggml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { convertToGguf } from '../../formats/gguf/convert.js';
import { openGgufBytes } from '../../formats/gguf/reader.js';
import { writeRandomCheckpoint } from '../../formats/random-checkpoint.js';
import {
  bundleWorker,
  type PageServer,
  runInChromium,
  servePage,
  workerPage,
} from '../../testing/browser/chromium-page.js';
import { DECODE_STEPS, runTinySteps, TINY_CONFIG } from '../../testing/browser/tiny-steps.js';
import { ggmlKernelCaseBits } from '../../testing/ggml-harness.js';
import { createWasmRuntime } from './wasm-runtime.js';

const THREADS = 2;
const WORKER_ENTRY = fileURLToPath(
  new URL('../../testing/browser/wasm-worker.ts', import.meta.url),
);

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
let page: PageServer;

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'kvasir-wasm-browser-'));
  await writeRandomCheckpoint(join(root, 'hf'), TINY_CONFIG, 18);
  await convertToGguf(join(root, 'hf'), join(root, 'tiny.gguf'), { dtype: 'Q8_0' });
  gguf = new Uint8Array(await readFile(join(root, 'tiny.gguf')));
  page = await servePage({
    '/': ['text/html', workerPage({ modelUrl: '/tiny.gguf', threads: THREADS })],
    '/worker.js': ['text/javascript', await bundleWorker(WORKER_ENTRY)],
    '/tiny.gguf': ['application/octet-stream', gguf],
  });
}, 60_000);

afterAll(async () => {
  // A beforeAll that failed before listening leaves no server to close.
  await page?.close();
  await rm(root, { recursive: true, force: true });
});

describe('wasm backend in chromium', () => {
  it('runs a GGUF from bytes (tokenizer, chat template, 2 threads, SIMD), giving Node’s logits bit for bit; both kernel builds give Node’s GGML results bit for bit', async () => {
    const [inBrowser, inNode, nodeKernelBits] = await Promise.all([
      runInChromium<PageResult>(`${page.origin}/`),
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
    // Three cases (shapes) per GGML block format.
    expect(inBrowser.kernelBits.relaxed).toHaveLength(3 * Object.keys(GGML_BLOCK_FORMATS).length);
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
