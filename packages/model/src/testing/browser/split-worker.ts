// The browser side of sharded-browser.test.ts, bundled by esbuild and started by the page as a
// module Web Worker: the tiny model whole on the wasm backend, then split by layer over two
// wasm instances (two WebAssembly memories, two thread pools), then over the page's WebGPU
// adapter and wasm (on an F32 file: with Q8_0 the wasm kernels quantize the activations as
// ggml does, WebGPU's do not, and that, not the split, would set the difference).
import { createGpu } from '@kvasir/gpu';
import { openGgufBytes } from '../../index.js';
import { runTinySteps } from './tiny-steps.js';

interface WorkerScope {
  onmessage: ((e: { data: { modelUrl: string; f32Url: string; threads: number } }) => void) | null;
  postMessage(data: unknown): void;
  Worker: new (...args: unknown[]) => object;
  fetch(url: string): Promise<{ ok: boolean; status: number; arrayBuffer(): Promise<ArrayBuffer> }>;
}

const scope = globalThis as unknown as WorkerScope;

// Counts the Web Workers the thread pools start: each wasm instance starts its own.
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
    const { modelUrl, f32Url, threads } = e.data;
    const open = async (url: string) => {
      const response = await scope.fetch(url);
      if (!response.ok) throw new Error(`GET ${url}: HTTP ${response.status}`);
      return openGgufBytes(await response.arrayBuffer(), { name: url.slice(1) });
    };
    const reader = await open(modelUrl);
    const whole = await runTinySteps(reader, threads);
    const wholeWorkers = workersStarted;
    const wasmWasm = await runTinySteps(reader, threads, [
      { backend: 'wasm' },
      { backend: 'wasm' },
    ]);
    const splitWorkers = workersStarted - wholeWorkers;
    await reader.close();
    const f32 = await open(f32Url);
    const gpu = await createGpu({ label: 'split-worker' });
    let webgpuWasm: Awaited<ReturnType<typeof runTinySteps>>;
    let adapter: string;
    try {
      adapter = `${gpu.adapterInfo.vendor} ${gpu.adapterInfo.architecture} ${gpu.adapterInfo.description}`;
      webgpuWasm = await runTinySteps(f32, threads, [
        { backend: 'webgpu', gpu, layers: { firstLayer: 0, numLayers: 1 } },
        { backend: 'wasm' },
      ]);
    } finally {
      gpu.destroy();
    }
    await f32.close();
    scope.postMessage({
      ok: true,
      whole,
      wasmWasm,
      webgpuWasm,
      adapter,
      isSoftware: gpu.isSoftware,
      wholeWorkers,
      splitWorkers,
    });
  } catch (err) {
    scope.postMessage({ ok: false, error: String((err as Error)?.stack ?? err) });
  }
};
