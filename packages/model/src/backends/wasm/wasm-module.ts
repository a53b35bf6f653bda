import { ModelError } from '../../errors.js';
import { KERNELS_RELAXED_WASM_BASE64, KERNELS_WASM_BASE64 } from './kernels-wasm.generated.js';
import { type WasmModule, wasmApi } from './wasm-api.js';
import { unsharedMemoryImport } from './wasm-unshared.js';

/** What the WebAssembly runtime offers the wasm backend, detected once per process. */
export interface WasmFeatures {
  /** 128-bit SIMD (required). */
  readonly simd128: boolean;
  /**
   * Relaxed SIMD, as the kernels' relaxed build needs it: the runtime validates that build and
   * its `i32x4.relaxed_dot_i8x16_i7x16_add_s` computes what the final specification says (a
   * probe runs it). The backend then runs that build. Chromium, Firefox and Node 22+ have it;
   * Safari has no relaxed SIMD; Node 20's, under `--experimental-wasm-relaxed-simd`, is an
   * earlier draft whose int8 dot doubles the products and drops the accumulator, so the probe
   * turns it down.
   */
  readonly relaxedSimd: boolean;
  /** Shared memory and atomics, so worker threads can run kernels over one memory. */
  readonly threads: boolean;
}

// (module (func (result v128) v128.const i32x4 0 0 0 0))
const SIMD_PROBE =
  '0061736d010000000105016000017b030201000a16011400fd0c000000000000000000000000000000000b';

// (func (param i32 i32 i32) (result i32) (i32x4.extract_lane 0
//   (i32x4.relaxed_dot_i8x16_i7x16_add_s (i8x16.splat p0) (i8x16.splat p1) (i32x4.splat p2))))
// exported as "f": f(-3, 7, 1000) is 1000 + 4 · (-3 · 7) = 916 by the specification.
const RELAXED_DOT_PROBE =
  '0061736d0100000001080160037f7f7f017f03020100070501016600000a160114002000fd0f2001fd0f2002fd11' +
  'fd9302fd1b000b';

const hexBytes = (hex: string) =>
  Uint8Array.from({ length: hex.length / 2 }, (_, i) =>
    Number.parseInt(hex.slice(2 * i, 2 * i + 2), 16),
  );

let features: WasmFeatures | undefined;

/** Detects SIMD, relaxed SIMD and threads support of this runtime (cached). */
export function wasmFeatures(): WasmFeatures {
  if (features) return features;
  const api = wasmApi();
  const has = (bytes: Uint8Array) => {
    try {
      return api?.validate(bytes) === true;
    } catch {
      return false;
    }
  };
  let threads = false;
  try {
    threads =
      api !== undefined &&
      typeof SharedArrayBuffer === 'function' &&
      new api.Memory({ initial: 1, maximum: 1, shared: true }).buffer instanceof SharedArrayBuffer;
  } catch {
    threads = false;
  }
  features = {
    simd128: has(hexBytes(SIMD_PROBE)),
    relaxedSimd: has(base64Bytes(KERNELS_RELAXED_WASM_BASE64)) && relaxedDotWorks(),
    threads,
  };
  return features;
}

/** Whether the runtime's relaxed int8 dot gives the specification's answer. */
function relaxedDotWorks(): boolean {
  const api = wasmApi();
  if (!api) return false;
  try {
    const module = new api.Module(hexBytes(RELAXED_DOT_PROBE));
    const probe = new api.Instance(module, {});
    return (probe.exports.f as (a: number, b: number, c: number) => number)(-3, 7, 1000) === 916;
  } catch {
    return false;
  }
}

/**
 * The two builds of the kernels: `plain` SIMD128, and `relaxed` (the same kernels with relaxed
 * SIMD's int8 dot product for GGML weights). Both give the same results bit for bit.
 */
export type KernelsBuild = 'relaxed' | 'plain';

/**
 * The memory the kernels run over: `shared` for worker threads, `unshared` for one thread (the
 * same code, its memory import unshared: a page that is not cross-origin isolated runs it).
 */
export type KernelsMemory = 'shared' | 'unshared';

const compiled = new Map<string, Promise<WasmModule>>();

/**
 * The compiled kernels module of `build` (default: `relaxed` where the runtime validates it,
 * else `plain`) over a `memory` of that kind (default shared), compiled once per process; a
 * compiled module can be sent to workers, which instantiate it over the same shared memory.
 * @throws {ModelError} `BACKEND` when the runtime lacks SIMD128, or shared memory for a
 *   `shared` module, or lacks relaxed SIMD and `build` is `relaxed`.
 */
export function kernelsModule(
  build?: KernelsBuild,
  memory: KernelsMemory = 'shared',
): Promise<{ module: WasmModule; build: KernelsBuild }> {
  const f = wasmFeatures();
  if (!f.simd128 || (memory === 'shared' && !f.threads)) {
    return Promise.reject(
      new ModelError(
        'BACKEND',
        memory === 'shared'
          ? `the wasm backend's threads need WebAssembly SIMD128 and shared memory (this runtime: simd128 ${f.simd128}, threads ${f.threads})`
          : 'the wasm backend needs WebAssembly SIMD128, which this runtime lacks',
      ),
    );
  }
  const b = build ?? (f.relaxedSimd ? 'relaxed' : 'plain');
  if (b === 'relaxed' && !f.relaxedSimd) {
    return Promise.reject(
      new ModelError(
        'BACKEND',
        'the relaxed build of the wasm kernels needs relaxed SIMD, which this runtime lacks (Node 20: --experimental-wasm-relaxed-simd)',
      ),
    );
  }
  const key = `${b} ${memory}`;
  let module = compiled.get(key);
  if (!module) {
    const bytes = base64Bytes(b === 'relaxed' ? KERNELS_RELAXED_WASM_BASE64 : KERNELS_WASM_BASE64);
    module = (wasmApi() as NonNullable<ReturnType<typeof wasmApi>>).compile(
      memory === 'shared' ? bytes : unsharedMemoryImport(bytes),
    );
    compiled.set(key, module);
  }
  return module.then((m) => ({ module: m, build: b }));
}

function base64Bytes(b64: string): Uint8Array {
  if (typeof Buffer === 'function') return new Uint8Array(Buffer.from(b64, 'base64'));
  const s = atob(b64);
  const out = new Uint8Array(s.length);
  for (let i = 0; i < s.length; i++) out[i] = s.charCodeAt(i);
  return out;
}
