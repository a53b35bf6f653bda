// The browser side of wasm-browser.test.ts, bundled by esbuild and started by the page as a
// module Web Worker: the wasm backend's thread 0 blocks in `memory.atomic.wait`, which a page's
// main thread may not do. Fetches the GGUF, runs the steps, and reports what the page checks.

import { wasmFeatures } from '../../backends/wasm/wasm-module.js';
import { createWasmRuntime } from '../../backends/wasm/wasm-runtime.js';
import { loadModel, ModelError, openGgufBytes } from '../../index.js';
import { ggmlKernelCaseBits } from '../ggml-harness.js';
import { runTinySteps } from './tiny-steps.js';

interface WorkerScope {
  onmessage: ((e: { data: { modelUrl: string; threads: number } }) => void) | null;
  postMessage(data: unknown): void;
  crossOriginIsolated?: boolean;
  Worker: new (...args: unknown[]) => object;
  fetch(url: string): Promise<{ ok: boolean; status: number; arrayBuffer(): Promise<ArrayBuffer> }>;
}

const scope = globalThis as unknown as WorkerScope;

// Counts the Web Workers the thread pool starts (threads - 1 of them), the one way to see from
// outside how many threads the backend really runs.
let workersStarted = 0;
const BaseWorker = scope.Worker;
scope.Worker = class extends BaseWorker {
  constructor(...args: unknown[]) {
    super(...args);
    workersStarted++;
  }
};

scope.onmessage = async (e) => {
  try {
    const response = await scope.fetch(e.data.modelUrl);
    if (!response.ok) throw new Error(`GET ${e.data.modelUrl}: HTTP ${response.status}`);
    const reader = await openGgufBytes(await response.arrayBuffer(), { name: 'tiny.gguf' });
    const result = await runTinySteps(reader, e.data.threads);
    await reader.close();
    // A path needs a file system, which a browser bundle does not have: a typed error.
    const pathError = await loadModel('/models/tiny.gguf', { backend: 'wasm', numBlocks: 8 }).then(
      () => undefined,
      (err: unknown) =>
        ModelError.isInstance(err)
          ? { code: err.code, message: err.message }
          : { code: undefined, message: String(err) },
    );
    const modelWorkers = workersStarted;
    // The GGML kernel cases in both builds of the kernels (Chromium has relaxed SIMD).
    const kernelBits: Record<string, number[][]> = {};
    for (const build of ['relaxed', 'plain'] as const) {
      const rt = await createWasmRuntime({
        threads: e.data.threads,
        reserveBytes: 16 << 20,
        build,
      });
      kernelBits[build] = ggmlKernelCaseBits(rt);
      await rt.close();
    }
    scope.postMessage({
      ok: true,
      ...result,
      kernelBits,
      workersStarted: modelWorkers,
      pathError,
      crossOriginIsolated: scope.crossOriginIsolated === true,
      features: wasmFeatures(),
    });
  } catch (err) {
    scope.postMessage({ ok: false, error: String((err as Error)?.stack ?? err) });
  }
};
