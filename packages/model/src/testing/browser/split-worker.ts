// The browser side of sharded-browser.test.ts, bundled by esbuild and started by the page as a
// module Web Worker: the tiny model whole on the wasm backend, then split by layer over two
// wasm instances (two WebAssembly memories, two thread pools), then over the page's WebGPU
// adapter and wasm (on an F32 file: with Q8_0 the wasm kernels quantize the activations as
// ggml does, WebGPU's do not, and that, not the split, would set the difference).
import { createGpu } from '@kvasir/gpu';
import { openGgufBytes } from '../../index.js';
import { runTinySteps } from './tiny-steps.js';
import { fetchBytes, serveTestWorker } from './worker-scope.js';

serveTestWorker<{ modelUrl: string; f32Url: string; threads: number }>(
  async ({ modelUrl, f32Url, threads }, workersStarted) => {
    const open = async (url: string) =>
      openGgufBytes(await fetchBytes(url), { name: url.slice(1) });
    const reader = await open(modelUrl);
    const whole = await runTinySteps(reader, threads);
    const wholeWorkers = workersStarted();
    const wasmWasm = await runTinySteps(reader, threads, [
      { backend: 'wasm' },
      { backend: 'wasm' },
    ]);
    const splitWorkers = workersStarted() - wholeWorkers;
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
    return {
      whole,
      wasmWasm,
      webgpuWasm,
      adapter,
      isSoftware: gpu.isSoftware,
      wholeWorkers,
      splitWorkers,
    };
  },
);
