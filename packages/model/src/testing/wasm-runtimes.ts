import { afterAll } from 'vitest';
import type { KernelsBuild } from '../backends/wasm/wasm-module.js';
import { createWasmRuntime, type WasmRuntime } from '../backends/wasm/wasm-runtime.js';

/**
 * One wasm runtime per thread count (and kernels build) for the calling test file (starting
 * workers is the slow part), all closed after its tests. Call once at the top level of a test
 * file. Without a build, the backend's own choice.
 */
export function wasmRuntimes(): (threads: number, build?: KernelsBuild) => Promise<WasmRuntime> {
  const runtimes = new Map<string, Promise<WasmRuntime>>();
  afterAll(async () => {
    for (const rt of runtimes.values()) await (await rt).close();
  });
  return (threads, build) => {
    const key = `${threads} ${build ?? 'auto'}`;
    let rt = runtimes.get(key);
    if (!rt) {
      rt = createWasmRuntime({ threads, reserveBytes: 16 << 20, build });
      runtimes.set(key, rt);
    }
    return rt;
  };
}
