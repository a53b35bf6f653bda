import { ModelError } from '../../errors.js';
import { type WasmMemory, wasmApi } from './wasm-api.js';

const PAGE = 65536;
/** The wasm32 address space: one memory holds at most 2^32 bytes. */
export const WASM32_MAX_BYTES = 2 ** 32;

/**
 * What a memory plan keeps out of a wasm memory's KV budget for the step's activations, RoPE
 * tables and thread scratch.
 */
export const WASM_ACTIVATION_RESERVE = 256 * 2 ** 20;

/**
 * The bytes one WebAssembly memory may hold: `requested`, or wasm32's 4 GiB.
 * @throws {ModelError} `INVALID_ARGUMENT` for a size that is not a positive integer or is past
 *   4 GiB (wasm32 addresses no more).
 */
export function wasmMemoryLimit(requested?: number): number {
  if (requested === undefined) return WASM32_MAX_BYTES;
  if (!(Number.isSafeInteger(requested) && requested > 0 && requested <= WASM32_MAX_BYTES)) {
    throw new ModelError(
      'INVALID_ARGUMENT',
      `a WebAssembly memory holds between 1 byte and 4 GiB (${WASM32_MAX_BYTES} bytes, wasm32's limit), got ${requested}`,
      { details: { wasmMemoryBytes: requested } },
    );
  }
  return requested;
}

const gib = (n: number) => `${(n / 2 ** 30).toFixed(2)} GiB`;

/**
 * The wasm backend's one `WebAssembly.Memory` (shared for threads, unshared for one) and a bump
 * allocator over it: weights, the KV cache, activations and the threads' scratch all live here,
 * addressed by byte offsets the kernels take. Nothing is ever freed one by one; the memory goes
 * with the model.
 *
 * Growing an unshared memory detaches its old `ArrayBuffer` (a shared one keeps its old views
 * valid): whoever keeps a view across allocations rebuilds it in {@link onGrow}.
 */
export class WasmArena {
  readonly memory: WasmMemory;
  #top: number;
  readonly #onGrow: (() => void)[] = [];

  /**
   * @param memory a memory of at most 65536 pages
   * @param base first free byte (the module's `__heap_base`)
   */
  constructor(memory: WasmMemory, base: number) {
    this.memory = memory;
    this.#top = align(base, 64);
  }

  /**
   * A memory (shared unless `shared` is false) with `reserveBytes` committed up front (so
   * loading does not grow it page by page) and room to grow to 4 GiB.
   * @throws {ModelError} `INVALID_CONFIG` when `reserveBytes` exceeds 4 GiB.
   */
  static createMemory(reserveBytes: number, what: string, shared = true): WasmMemory {
    WasmArena.checkFits(reserveBytes, what);
    const pages = Math.min(65536, Math.ceil(reserveBytes / PAGE));
    const api = wasmApi() as NonNullable<ReturnType<typeof wasmApi>>;
    return new api.Memory({ initial: pages, maximum: 65536, shared });
  }

  /** Calls `rebuild` after every growth of the memory, to remake views kept across allocations. */
  onGrow(rebuild: () => void): void {
    this.#onGrow.push(rebuild);
  }

  /**
   * @throws {ModelError} `INVALID_CONFIG` naming the wasm32 limit and what needed more.
   */
  static checkFits(bytes: number, what: string): void {
    if (bytes > WASM32_MAX_BYTES) {
      throw new ModelError(
        'INVALID_CONFIG',
        `${what} needs ${gib(bytes)} of WebAssembly memory (weights, KV cache and activations); the wasm backend's wasm32 memory holds at most 4 GiB: use fewer KV blocks, int8 weights (weightQuant: 'int8') or the webgpu backend`,
        { details: { bytes, limit: WASM32_MAX_BYTES } },
      );
    }
  }

  /** Bytes allocated so far (the top of the heap). */
  get top(): number {
    return this.#top;
  }

  /**
   * Allocates `bytes` (zeroed: fresh memory is zero, and nothing is reused), aligned to 64.
   * @throws {ModelError} `INVALID_CONFIG` past 4 GiB.
   */
  alloc(bytes: number, what = 'an allocation'): number {
    const ptr = this.#top;
    const end = align(ptr + bytes, 64);
    WasmArena.checkFits(end, what);
    const have = this.memory.buffer.byteLength;
    this.#top = end;
    if (end > have) {
      this.memory.grow(Math.ceil((end - have) / PAGE));
      for (const rebuild of this.#onGrow) rebuild();
    }
    return ptr;
  }

  f32(ptr: number, length: number): Float32Array {
    return new Float32Array(this.memory.buffer, ptr, length);
  }

  u32(ptr: number, length: number): Uint32Array {
    return new Uint32Array(this.memory.buffer, ptr, length);
  }

  i32(ptr: number, length: number): Int32Array {
    return new Int32Array(this.memory.buffer, ptr, length);
  }

  u8(ptr: number, length: number): Uint8Array {
    return new Uint8Array(this.memory.buffer, ptr, length);
  }
}

export function align(n: number, a: number): number {
  return Math.ceil(n / a) * a;
}
