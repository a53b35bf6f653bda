// The browser side of wasm-browser.test.ts, bundled by esbuild and started by the page as a
// module Web Worker: the wasm backend's thread 0 blocks in `memory.atomic.wait`, which a page's
// main thread may not do. Fetches the GGUF, runs the steps, and reports what the page checks.

import { wasmFeatures } from '../../backends/wasm/wasm-module.js';
import { createWasmRuntime } from '../../backends/wasm/wasm-runtime.js';
import { loadModel, ModelError, openGgufBytes } from '../../index.js';
import { ggmlKernelCaseBits } from '../ggml-harness.js';
import { runTinySteps } from './tiny-steps.js';
import { fetchBytes, serveTestWorker } from './worker-scope.js';

serveTestWorker<{ modelUrl: string; threads: number }>(
  async ({ modelUrl, threads }, workersStarted) => {
    const reader = await openGgufBytes(await fetchBytes(modelUrl), { name: 'tiny.gguf' });
    const result = await runTinySteps(reader, threads);
    await reader.close();
    // A path needs a file system, which a browser bundle does not have: a typed error.
    const pathError = await loadModel('/models/tiny.gguf', { backend: 'wasm', numBlocks: 8 }).then(
      () => undefined,
      (err: unknown) =>
        ModelError.isInstance(err)
          ? { code: err.code, message: err.message }
          : { code: undefined, message: String(err) },
    );
    // The model's thread pool starts threads - 1 Web Workers.
    const modelWorkers = workersStarted();
    // The GGML kernel cases in both builds of the kernels (Chromium has relaxed SIMD).
    const kernelBits: Record<string, number[][]> = {};
    for (const build of ['relaxed', 'plain'] as const) {
      const rt = await createWasmRuntime({ threads, reserveBytes: 16 << 20, build });
      kernelBits[build] = ggmlKernelCaseBits(rt);
      await rt.close();
    }
    return {
      ...result,
      kernelBits,
      workersStarted: modelWorkers,
      pathError,
      crossOriginIsolated:
        (globalThis as { crossOriginIsolated?: boolean }).crossOriginIsolated === true,
      features: wasmFeatures(),
    };
  },
);
