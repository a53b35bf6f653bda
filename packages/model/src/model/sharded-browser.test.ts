// A model split by layer in a real browser (Debian's chromium, headless through playwright-core):
// two wasm instances, each its own WebAssembly memory and thread pool, give the unsplit model's
// logits bit for bit, there and in Node; the page's WebGPU adapter (SwiftShader) plus wasm gives
// the unsplit wasm model's within the tolerance of WebGPU against wasm (F32 weights).
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { convertToGguf } from '../formats/gguf/convert.js';
import { openGgufBytes } from '../formats/gguf/reader.js';
import { writeRandomCheckpoint } from '../formats/random-checkpoint.js';
import {
  bundleWorker,
  type PageServer,
  runInChromium,
  servePage,
  workerPage,
} from '../testing/browser/chromium-page.js';
import {
  DECODE_STEPS,
  runTinySteps,
  TINY_CONFIG,
  type TinyStepsResult,
} from '../testing/browser/tiny-steps.js';

const THREADS = 2;
const WORKER_ENTRY = fileURLToPath(new URL('../testing/browser/split-worker.ts', import.meta.url));

interface PageResult {
  ok: boolean;
  error?: string;
  whole: TinyStepsResult;
  wasmWasm: TinyStepsResult;
  webgpuWasm: TinyStepsResult;
  adapter: string;
  isSoftware: boolean;
  wholeWorkers: number;
  splitWorkers: number;
}

let root: string;
let gguf: Uint8Array;
let ggufF32: Uint8Array;
let page: PageServer;

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'kvasir-split-browser-'));
  await writeRandomCheckpoint(join(root, 'hf'), TINY_CONFIG, 18);
  await convertToGguf(join(root, 'hf'), join(root, 'tiny.gguf'), { dtype: 'Q8_0' });
  gguf = new Uint8Array(await readFile(join(root, 'tiny.gguf')));
  await convertToGguf(join(root, 'hf'), join(root, 'tiny-f32.gguf'), { dtype: 'F32' });
  ggufF32 = new Uint8Array(await readFile(join(root, 'tiny-f32.gguf')));
  page = await servePage({
    '/': [
      'text/html',
      workerPage({ modelUrl: '/tiny.gguf', f32Url: '/tiny-f32.gguf', threads: THREADS }),
    ],
    '/worker.js': ['text/javascript', await bundleWorker(WORKER_ENTRY)],
    '/tiny.gguf': ['application/octet-stream', gguf],
    '/tiny-f32.gguf': ['application/octet-stream', ggufF32],
  });
}, 60_000);

afterAll(async () => {
  await page?.close();
  await rm(root, { recursive: true, force: true });
});

const floats = (bits: number[]) => new Float32Array(Uint32Array.from(bits).buffer);

describe('a model split by layer in chromium', () => {
  it('over two wasm memories gives the unsplit logits bit for bit; over WebGPU + wasm within 1e-4', async () => {
    const inNodeOf = (bytes: Uint8Array) =>
      openGgufBytes(bytes).then(async (reader) => {
        try {
          return await runTinySteps(reader, THREADS);
        } finally {
          await reader.close();
        }
      });
    const [inBrowser, inNode, inNodeF32] = await Promise.all([
      runInChromium<PageResult>(`${page.origin}/`),
      inNodeOf(gguf),
      inNodeOf(ggufF32),
    ]);
    expect(inBrowser.whole.logitsBits).toHaveLength(DECODE_STEPS + 1);
    expect(inBrowser.whole.logitsBits).toEqual(inNode.logitsBits);
    // Two instances, each with its own pool of THREADS - 1 workers beside the model's thread.
    expect(inBrowser.wholeWorkers).toBe(THREADS - 1);
    expect(inBrowser.splitWorkers).toBe(2 * (THREADS - 1));
    expect(inBrowser.wasmWasm.promptIds).toEqual(inNode.promptIds);
    expect(inBrowser.wasmWasm.tokens).toEqual(inNode.tokens);
    expect(inBrowser.wasmWasm.logitsBits).toEqual(inNode.logitsBits);
    // Chromium's adapter here is SwiftShader (a software Vulkan), which runs compute shaders.
    expect(inBrowser.isSoftware, inBrowser.adapter).toBe(true);
    expect(inBrowser.webgpuWasm.logitsBits).toHaveLength(DECODE_STEPS + 1);
    for (const [step, bits] of inBrowser.webgpuWasm.logitsBits.entries()) {
      const got = floats(bits);
      const want = floats(inNodeF32.logitsBits[step] as number[]);
      let worst = 0;
      for (let i = 0; i < want.length; i++) {
        worst = Math.max(worst, Math.abs((got[i] as number) - (want[i] as number)));
      }
      expect(worst, `step ${step}`).toBeLessThan(1e-4);
    }
  }, 120_000);
});
