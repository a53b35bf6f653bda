import { createCpuExecutor } from '../backends/cpu/cpu-executor.js';
import { ModelError } from '../errors.js';
import type { Executor, ExecutorContext } from './executor.js';

/**
 * The backends a model can run on. A new backend adds its name here, a factory returning an
 * {@link Executor} under `src/backends/<name>/`, and a branch in {@link createExecutor}.
 */
export const BACKENDS = ['webgpu', 'cpu'] as const;

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
 * Builds the executor of the chosen backend. `'auto'` takes WebGPU when an adapter exists (a
 * GPU or the llvmpipe software adapter), else the CPU; a given `gpu` implies WebGPU.
 *
 * @throws {ModelError} `BACKEND` when WebGPU is required (chosen, or a `gpu` given) and
 *   unavailable; `INVALID_CONFIG` for shapes the backend cannot run; reader errors.
 */
export async function createExecutor(
  ctx: ExecutorContext,
  choice: BackendChoice,
  gpu: unknown,
): Promise<{ backend: BackendName; executor: Executor }> {
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
