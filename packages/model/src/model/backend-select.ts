import { createCpuExecutor } from '../backends/cpu/cpu-executor.js';
import { ModelError } from '../errors.js';
import type { Executor, ExecutorContext } from '../execution/executor.js';

/**
 * The backends a model can run on. A new backend adds its name here, a factory returning an
 * {@link Executor} under `src/backends/<name>/`, and a branch in {@link createExecutor}.
 */
export const BACKENDS = ['webgpu', 'wasm', 'cpu'] as const;

/** A backend that runs a model. */
export type BackendName = (typeof BACKENDS)[number];

/** What `loadModel`'s `backend` option accepts: a backend, or `'auto'` to pick one. */
export type BackendChoice = 'auto' | BackendName;

/**
 * Checks a `backend` option.
 * @throws {ModelError} `INVALID_ARGUMENT` naming the accepted values.
 */
export function checkBackendChoice(choice: unknown): asserts choice is BackendChoice {
  if (choice === 'auto' || (BACKENDS as readonly unknown[]).includes(choice)) return;
  throw new ModelError(
    'INVALID_ARGUMENT',
    `backend must be one of 'auto', ${BACKENDS.map((b) => `'${b}'`).join(', ')}, got '${String(choice)}'`,
  );
}

/**
 * Builds the executor of the chosen backend. `'auto'` takes WebGPU on a hardware adapter,
 * else the wasm backend (WebAssembly SIMD on worker threads; a software adapter such as
 * llvmpipe reaches a fraction of the memory bandwidth it does), else the CPU reference; a
 * given `gpu` implies WebGPU.
 *
 * @throws {ModelError} `BACKEND` when WebGPU is required (chosen, or a `gpu` given) and
 *   unavailable, or `'wasm'` is chosen on a runtime without SIMD128 and shared memory;
 *   `INVALID_CONFIG` for shapes the backend cannot run; reader errors.
 */
export async function createExecutor(
  ctx: ExecutorContext,
  choice: BackendChoice,
  gpu: unknown,
  options: { threads?: number } = {},
): Promise<{ backend: BackendName; executor: Executor }> {
  if (choice === 'wasm') {
    const { createWasmExecutor } = await import('../backends/wasm/wasm-executor.js');
    return { backend: 'wasm', executor: await createWasmExecutor(ctx, options) };
  }
  if (choice === 'auto' && gpu === undefined && !(await hardwareAdapter())) {
    const { createWasmExecutor } = await import('../backends/wasm/wasm-executor.js');
    const { wasmFeatures } = await import('../backends/wasm/wasm-module.js');
    const f = wasmFeatures();
    if (f.simd128 && f.threads) {
      return { backend: 'wasm', executor: await createWasmExecutor(ctx, options) };
    }
    return { backend: 'cpu', executor: await createCpuExecutor(ctx) };
  }
  if (choice !== 'cpu' || gpu !== undefined) {
    // Imported on demand: a CPU-only run never loads @kvasir/gpu's native WebGPU binding.
    const { createGpuExecutor } = await import('../backends/webgpu/gpu-executor.js');
    const executor = await createGpuExecutor(ctx, {
      gpu,
      required: choice === 'webgpu' || gpu !== undefined,
    });
    if (executor) return { backend: 'webgpu', executor };
  }
  return { backend: 'cpu', executor: await createCpuExecutor(ctx) };
}

/** Whether a hardware WebGPU adapter exists (a software one, such as llvmpipe, is not). */
async function hardwareAdapter(): Promise<boolean> {
  try {
    const { createGpu } = await import('@kvasir/gpu');
    const gpu = await createGpu({ label: 'kvasir-model-probe' });
    const hardware = !gpu.isSoftware;
    gpu.destroy();
    return hardware;
  } catch {
    return false;
  }
}
