import { createGpu, type Gpu } from '@kvasir/gpu';

let shared: Promise<Gpu> | undefined;

/**
 * One `Gpu` per test file (vitest runs files in separate workers). Call {@link releaseTestGpu}
 * in `afterAll`.
 */
export function testGpu(): Promise<Gpu> {
  shared ??= createGpu();
  return shared;
}

/** Destroy the shared test `Gpu`. */
export async function releaseTestGpu(): Promise<void> {
  if (shared === undefined) return;
  const gpu = await shared;
  shared = undefined;
  gpu.destroy();
}
