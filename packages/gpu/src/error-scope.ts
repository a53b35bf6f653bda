import { GpuError } from './errors.js';

/**
 * Runs `fn` inside validation, out-of-memory and internal error scopes of `device` and throws
 * the first error they caught (what `fn` throws comes first).
 * @throws {GpuError} `VALIDATION`, `OUT_OF_MEMORY` or `INTERNAL`; whatever `fn` throws.
 */
export async function withErrorScope<T>(device: GPUDevice, fn: () => T | Promise<T>): Promise<T> {
  device.pushErrorScope('internal');
  device.pushErrorScope('out-of-memory');
  device.pushErrorScope('validation');
  let result: T | undefined;
  let thrown: { error: unknown } | undefined;
  try {
    result = await fn();
  } catch (error) {
    thrown = { error };
  }
  const validation = await device.popErrorScope();
  const oom = await device.popErrorScope();
  const internal = await device.popErrorScope();
  if (thrown !== undefined) throw thrown.error;
  if (validation !== null) {
    throw new GpuError('VALIDATION', `WebGPU validation error: ${validation.message}`);
  }
  if (oom !== null) throw new GpuError('OUT_OF_MEMORY', `WebGPU out of memory: ${oom.message}`);
  if (internal !== null) {
    throw new GpuError('INTERNAL', `WebGPU internal error: ${internal.message}`);
  }
  return result as T;
}
