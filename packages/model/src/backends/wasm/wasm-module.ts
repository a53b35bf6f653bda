import { ModelError } from '../../errors.js';
import { KERNELS_WASM_BASE64 } from './kernels-wasm.generated.js';
import { type WasmModule, wasmApi } from './wasm-api.js';

/** What the WebAssembly runtime offers the wasm backend, detected once per process. */
export interface WasmFeatures {
  /** 128-bit SIMD (required). */
  readonly simd128: boolean;
  /**
   * Relaxed SIMD (fused multiply-add, int8 dot products). Detected and reported; the kernels
   * do not use it yet (clang 14, Debian 12's, has no final relaxed-SIMD intrinsics).
   */
  readonly relaxedSimd: boolean;
  /** Shared memory and atomics, so worker threads can run kernels over one memory. */
  readonly threads: boolean;
}

// (module (func (result v128) v128.const i32x4 0 0 0 0))
const SIMD_PROBE =
  '0061736d010000000105016000017b030201000a16011400fd0c000000000000000000000000000000000b';
// (module (func (result v128) v128.const 0 v128.const 0 v128.const 0 f32x4.relaxed_madd))
const RELAXED_PROBE =
  '0061736d010000000105016000017b030201000a3d013b00fd0c00000000000000000000000000000000fd0c' +
  '00000000000000000000000000000000fd0c00000000000000000000000000000000fd85020b';

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
    relaxedSimd: has(hexBytes(RELAXED_PROBE)),
    threads,
  };
  return features;
}

let compiled: Promise<WasmModule> | undefined;

/**
 * The compiled kernels module (compiled once per process; a compiled module can be sent
 * to workers, which instantiate it over the same shared memory).
 * @throws {ModelError} `BACKEND` when the runtime lacks SIMD128 or shared memory.
 */
export function kernelsModule(): Promise<WasmModule> {
  const f = wasmFeatures();
  if (!f.simd128 || !f.threads) {
    return Promise.reject(
      new ModelError(
        'BACKEND',
        `the wasm backend needs WebAssembly SIMD128 and shared memory (this runtime: simd128 ${f.simd128}, threads ${f.threads})`,
      ),
    );
  }
  compiled ??= (wasmApi() as NonNullable<ReturnType<typeof wasmApi>>).compile(
    base64Bytes(KERNELS_WASM_BASE64),
  );
  return compiled;
}

function base64Bytes(b64: string): Uint8Array {
  if (typeof Buffer === 'function') return new Uint8Array(Buffer.from(b64, 'base64'));
  const s = atob(b64);
  const out = new Uint8Array(s.length);
  for (let i = 0; i < s.length; i++) out[i] = s.charCodeAt(i);
  return out;
}
