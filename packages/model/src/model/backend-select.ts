import type { Gpu } from '@kvasir/gpu';
import { createCpuExecutor } from '../backends/cpu/cpu-executor.js';
import { ModelError } from '../errors.js';
import type { Executor, ExecutorContext } from '../execution/executor.js';

/**
 * The backends a model can run on. A new backend adds its name here, a factory returning an
 * {@link Executor} under `src/backends/<name>/`, a branch in {@link createExecutor}, and its
 * limits in `device-limits.ts`.
 */
export const BACKENDS = ['webgpu', 'wasm', 'cpu'] as const;

/** A backend that runs a model. */
export type BackendName = (typeof BACKENDS)[number];

/** What `loadModel`'s `backend` option accepts: a backend, or `'auto'` to pick one. */
export type BackendChoice = 'auto' | BackendName;

/** A WebGPU adapter, as a probe found it. */
export interface WebGpuAdapterProbe {
  /** A software adapter (llvmpipe, SwiftShader): right answers, a fraction of the bandwidth. */
  readonly isSoftware: boolean;
}

/** What this runtime offers the backends. */
export interface BackendProbe {
  /** The adapter a WebGPU device would be opened on; `null` when there is none. */
  readonly webgpu: WebGpuAdapterProbe | null;
  /** What WebAssembly offers the wasm backend, which needs `simd128` and `threads`. */
  readonly wasm: {
    readonly simd128: boolean;
    /** Shared memory and atomics, so worker threads run kernels over one memory. */
    readonly threads: boolean;
    /** Detected and reported; the kernels do not use it yet. */
    readonly relaxedSimd: boolean;
  };
}

/** Options of {@link probeBackends}. */
export interface ProbeBackendsOptions {
  /**
   * What the caller's own WebGPU probe found (`null`: no adapter). Omitted, a device is opened
   * and closed here. Dawn writes its warnings from native code straight to the process's
   * stderr, so an application that keeps them off probes in a child process and passes that.
   */
  readonly webgpu?: WebGpuAdapterProbe | null;
}

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

/** Finds what this runtime offers each backend: a WebGPU adapter, and WebAssembly's features. */
export async function probeBackends(options: ProbeBackendsOptions = {}): Promise<BackendProbe> {
  // Imported on demand, as the executors are: the module carries the kernels' bytes.
  const { wasmFeatures } = await import('../backends/wasm/wasm-module.js');
  const { simd128, threads, relaxedSimd } = wasmFeatures();
  const webgpu = options.webgpu !== undefined ? options.webgpu : await probeWebGpu();
  return { webgpu, wasm: { simd128, threads, relaxedSimd } };
}

/**
 * The one rule for `'auto'`: WebGPU on a hardware adapter; else the wasm backend where
 * WebAssembly has SIMD128 and threads (a software adapter such as llvmpipe reaches a fraction
 * of the memory bandwidth it does); else the CPU reference. A named backend is itself.
 * @throws {ModelError} `BACKEND` for `'webgpu'` on a probe without an adapter, or `'wasm'`
 *   without SIMD128 and threads.
 */
export function selectBackend(choice: BackendChoice, probe: BackendProbe): BackendName {
  checkBackendChoice(choice);
  const wasmRuns = probe.wasm.simd128 && probe.wasm.threads;
  if (choice === 'webgpu' && probe.webgpu === null) {
    throw new ModelError('BACKEND', 'no WebGPU adapter');
  }
  if (choice === 'wasm' && !wasmRuns) {
    throw new ModelError(
      'BACKEND',
      'the wasm backend needs WebAssembly SIMD128 and shared memory (threads), which this runtime lacks',
    );
  }
  if (choice !== 'auto') return choice;
  if (probe.webgpu !== null && !probe.webgpu.isSoftware) return 'webgpu';
  return wasmRuns ? 'wasm' : 'cpu';
}

/**
 * Builds the executor of a choice. `'auto'` probes and takes {@link selectBackend}'s answer,
 * or, when the hardware adapter it found then fails to open, the answer without WebGPU; a given
 * `gpu` implies WebGPU unless `'wasm'` is chosen.
 *
 * @throws {ModelError} `BACKEND` when WebGPU is required (chosen, or a `gpu` given) and
 *   unavailable, or `'wasm'` is chosen on a runtime without SIMD128 and shared memory;
 *   `INVALID_CONFIG` for shapes the backend cannot run; reader errors.
 */
export async function createExecutor(
  ctx: ExecutorContext,
  choice: BackendChoice,
  gpu: Gpu | undefined,
  options: { threads?: number } = {},
): Promise<{ backend: BackendName; executor: Executor }> {
  const build = (backend: BackendName, required: boolean) =>
    buildExecutor(ctx, backend, { gpu, required, threads: options.threads });
  let backend: BackendName;
  let fallback: BackendName | undefined;
  if (choice === 'wasm') backend = 'wasm';
  else if (gpu !== undefined || choice === 'webgpu') backend = 'webgpu';
  else if (choice === 'cpu') backend = 'cpu';
  else {
    const probe = await probeBackends();
    backend = selectBackend('auto', probe);
    fallback = selectBackend('auto', { ...probe, webgpu: null });
  }
  const executor = await build(backend, fallback === undefined);
  if (executor) return { backend, executor };
  const other = fallback as BackendName;
  return { backend: other, executor: (await build(other, true)) as Executor };
}

/**
 * The executor of one backend. Undefined only for WebGPU when it is not `required` and no
 * device opens.
 * @internal
 */
export async function buildExecutor(
  ctx: ExecutorContext,
  backend: BackendName,
  options: { gpu?: Gpu; required: boolean; threads?: number; adapter?: number },
): Promise<Executor | undefined> {
  if (backend === 'wasm') {
    const { createWasmExecutor } = await import('../backends/wasm/wasm-executor.js');
    return createWasmExecutor(ctx, { threads: options.threads });
  }
  if (backend === 'webgpu') {
    // Imported on demand: a CPU-only run never loads @kvasir/gpu's native WebGPU binding.
    const { createGpuExecutor } = await import('../backends/webgpu/gpu-executor.js');
    return createGpuExecutor(ctx, {
      gpu: options.gpu,
      required: options.required,
      adapter: options.adapter,
    });
  }
  return createCpuExecutor(ctx);
}

/** The adapter `createGpu` would take, opened and closed in this process, or null. */
async function probeWebGpu(): Promise<WebGpuAdapterProbe | null> {
  try {
    const { createGpu } = await import('@kvasir/gpu');
    const gpu = await createGpu({ label: 'kvasir-model-probe' });
    const isSoftware = gpu.isSoftware;
    gpu.destroy();
    return { isSoftware };
  } catch {
    return null;
  }
}
