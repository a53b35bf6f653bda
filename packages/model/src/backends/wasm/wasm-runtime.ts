import { ThreadPool } from './thread-pool.js';
import { type WasmGlobal, wasmApi } from './wasm-api.js';
import { WasmArena } from './wasm-arena.js';
import {
  type KernelsBuild,
  type KernelsMemory,
  kernelsModule,
  type WasmFeatures,
  wasmFeatures,
} from './wasm-module.js';
import { OP_WORDS, ProgramBuilder } from './wasm-program.js';

/** Room for the module's own data and stack below `__heap_base`. */
const MODULE_BYTES = 1 << 20;

/** Milliseconds per op label, summed over the steps profiled (benchmarks). */
export interface WasmOpProfile {
  readonly ms: Map<string, number>;
  /** Ops run per label. */
  readonly calls: Map<string, number>;
  /** Ops run, and milliseconds of as many empty one-op programs (the per-op wake-up cost). */
  ops: number;
  empty: number;
}

/** The wasm backend's machinery: one memory, its allocator, and the threads over it. */
export interface WasmRuntime {
  readonly arena: WasmArena;
  /** `shared` for more than one thread; one thread runs over an unshared memory. */
  readonly memory: KernelsMemory;
  readonly pool: ThreadPool;
  readonly features: WasmFeatures;
  /** Which build of the kernels runs. */
  readonly build: KernelsBuild;
  /** A program of up to `capacity` ops, allocated in the arena. */
  program(capacity: number): ProgramBuilder;
  /** Runs a built program on every thread. */
  run(program: ProgramBuilder): void;
  /**
   * Runs a built program one op at a time (each op a program of its own, so every op pays a
   * wake-up: subtract {@link WasmOpProfile}'s `empty`), adding each op's milliseconds to
   * `profile` under its label.
   */
  runProfiled(program: ProgramBuilder, profile: WasmOpProfile): void;
  close(): Promise<void>;
}

/**
 * Compiles (once) and instantiates the kernels over a new memory of `reserveBytes` (it grows
 * later as needed, up to 4 GiB) and starts `threads - 1` workers. The memory is shared for
 * more than one thread; one thread runs over an unshared memory, so it needs no shared memory
 * (a page without cross-origin isolation).
 * @throws {ModelError} `BACKEND` without SIMD128, or without shared memory for threads, or when
 *   a worker cannot start; `INVALID_CONFIG` past 4 GiB; `INVALID_ARGUMENT` for a bad thread
 *   count.
 */
export async function createWasmRuntime(options: {
  threads: number;
  reserveBytes: number;
  what?: string;
  spin?: number;
  /** The kernels' build (default: relaxed where the runtime has it). */
  build?: KernelsBuild;
}): Promise<WasmRuntime> {
  const kind: KernelsMemory = options.threads === 1 ? 'unshared' : 'shared';
  const { module, build } = await kernelsModule(options.build, kind);
  const memory = WasmArena.createMemory(
    options.reserveBytes + MODULE_BYTES,
    options.what ?? 'the wasm backend',
    kind === 'shared',
  );
  const api = wasmApi() as NonNullable<ReturnType<typeof wasmApi>>;
  const instance = await api.instantiate(module, { env: { memory } });
  const base = (instance.exports.__heap_base as WasmGlobal).value;
  const arena = new WasmArena(memory, base);
  const pool = await ThreadPool.create(module, instance, arena, options.threads, {
    spin: options.spin,
  });
  let nop = 0;
  return {
    arena,
    memory: kind,
    pool,
    features: wasmFeatures(),
    build,
    program(capacity) {
      const ptr = arena.alloc(capacity * OP_WORDS * 4, 'a program');
      const builder = new ProgramBuilder(ptr, arena.i32(ptr, capacity * OP_WORDS), capacity);
      arena.onGrow(() => builder.rebind(arena.i32(ptr, capacity * OP_WORDS)));
      return builder;
    },
    run(program) {
      pool.run(program.ptr, program.count);
    },
    runProfiled(program, profile) {
      if (nop === 0) {
        nop = arena.alloc(OP_WORDS * 4, 'a profiling no-op');
        arena.i32(nop, OP_WORDS).fill(0);
      }
      for (let i = 0; i < program.count; i++) {
        const label = program.labels[i] || 'other';
        let t0 = performance.now();
        pool.run(program.ptr + i * OP_WORDS * 4, 1);
        profile.ms.set(label, (profile.ms.get(label) ?? 0) + performance.now() - t0);
        profile.calls.set(label, (profile.calls.get(label) ?? 0) + 1);
        t0 = performance.now();
        pool.run(nop, 1);
        profile.empty += performance.now() - t0;
        profile.ops++;
      }
    },
    close: () => pool.close(),
  };
}
