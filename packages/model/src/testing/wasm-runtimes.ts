import { afterAll } from 'vitest';
import { createWasmRuntime, type WasmRuntime } from '../backends/wasm/wasm-runtime.js';

/**
 * One wasm runtime per thread count for the calling test file (starting workers is the slow
 * part), all closed after its tests. Call once at the top level of a test file.
 */
export function wasmRuntimes(): (threads: number) => Promise<WasmRuntime> {
  const runtimes = new Map<number, Promise<WasmRuntime>>();
  afterAll(async () => {
    for (const rt of runtimes.values()) await (await rt).close();
  });
  return (threads) => {
    let rt = runtimes.get(threads);
    if (!rt) {
      rt = createWasmRuntime({ threads, reserveBytes: 16 << 20 });
      runtimes.set(threads, rt);
    }
    return rt;
  };
}
