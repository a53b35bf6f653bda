import { ModelError } from '../../errors.js';
import {
  blobUrl,
  browserWorker,
  type WasmGlobal,
  type WasmInstance,
  type WasmModule,
} from './wasm-api.js';
import type { WasmArena } from './wasm-arena.js';

// Control block words (c/kernels.c, enum C_*).
const C_GEN = 0;
const C_NTH = 1;
const C_PROG = 2;
const C_NOPS = 3;
const C_DONE = 4;
const C_BGEN = 6;
const C_QUIT = 7;
const C_SPIN = 9;
const C_ERROR = 10;
const C_LOST = 11;
const C_WAKEUPS = 14;
const CONTROL_BYTES = 64;
/** Each thread's shadow stack (the kernels keep a few small arrays there). */
const STACK_BYTES = 64 * 1024;
/** Spins before a waiting thread blocks: about 10-50 µs, the gap between ops of one step. */
const DEFAULT_SPIN = 20000;

interface KernelExports {
  kv_run(ctrl: number): number;
  kv_worker(ctrl: number, tid: number, seen: number): void;
  __stack_pointer: WasmGlobal;
}

/** A started worker, Node's or a browser's, reduced to what the pool needs. */
interface WorkerHandle {
  terminate(): Promise<unknown> | undefined;
}

// One source for Node's worker_threads (eval'd, CommonJS) and browsers' Web Workers (a Blob
// URL): instantiate the module over the shared memory, take a private stack, then live in
// kv_worker until the pool quits. A trap sets C_ERROR and wakes every waiter, so thread 0
// returns instead of waiting forever.
const WORKER_SOURCE = `
const start = (d, post) => {
  let inst;
  try {
    inst = new WebAssembly.Instance(d.module, { env: { memory: d.memory } });
    inst.exports.__stack_pointer.value = d.stackTop;
  } catch (e) { post({ error: String((e && e.stack) || e) }); return; }
  post({ ready: true });
  try {
    inst.exports.kv_worker(d.ctrl, d.tid, d.seen);
  } catch (e) {
    const v = new Int32Array(d.memory.buffer);
    const c = d.ctrl / 4;
    Atomics.store(v, c + ${C_ERROR}, 1);
    Atomics.add(v, c + ${C_DONE}, 1);
    for (const w of [${C_GEN}, ${C_DONE}, ${C_BGEN}]) Atomics.notify(v, c + w);
    post({ error: String((e && e.stack) || e) });
  }
};
if (typeof require === 'function') {
  const { parentPort, workerData } = require('node:worker_threads');
  start(workerData, (m) => parentPort.postMessage(m));
} else {
  self.onmessage = (e) => start(e.data, (m) => self.postMessage(m));
}
`;

/**
 * Threads that run kernel programs over one shared memory: the calling thread is thread 0, and
 * `threads - 1` workers park in wasm (`memory.atomic.wait`, no timeout) between programs, so an
 * idle pool uses no CPU. {@link run} wakes them once; inside a program they meet only at the
 * barriers the program marks, so a whole forward step costs one wake-up per worker, never a
 * message.
 *
 * In a browser, construct it inside a Web Worker: thread 0 blocks in `memory.atomic.wait`,
 * which a page's main thread may not do.
 */
export class ThreadPool {
  readonly threads: number;
  readonly #arena: WasmArena;
  readonly #ctrl: number;
  readonly #exports: KernelExports;
  readonly #workers: WorkerHandle[];
  readonly #workerErrors: { message?: string };
  #error: string | undefined;
  #closed = false;

  private constructor(
    arena: WasmArena,
    ctrl: number,
    exports: KernelExports,
    workers: WorkerHandle[],
    errors: { message?: string },
  ) {
    this.#arena = arena;
    this.#ctrl = ctrl;
    this.#exports = exports;
    this.#workers = workers;
    this.#workerErrors = errors;
    this.threads = workers.length + 1;
  }

  /**
   * Starts `threads - 1` workers, each with its own instance of `module` over `arena`'s
   * memory; `instance` (this thread's) runs thread 0's share.
   * @throws {ModelError} `INVALID_ARGUMENT` for a thread count outside 1..256; `BACKEND` when a
   *   worker cannot start.
   */
  static async create(
    module: WasmModule,
    instance: WasmInstance,
    arena: WasmArena,
    threads: number,
    options: { spin?: number } = {},
  ): Promise<ThreadPool> {
    if (!(Number.isInteger(threads) && threads >= 1 && threads <= 256)) {
      throw new ModelError(
        'INVALID_ARGUMENT',
        `threads must be an integer in 1..256, got ${threads}`,
      );
    }
    const memory = arena.memory;
    const exports = instance.exports as unknown as KernelExports;
    const ctrl = arena.alloc(CONTROL_BYTES, 'the thread control block');
    const words = arena.i32(ctrl, CONTROL_BYTES / 4);
    words[C_NTH] = threads;
    words[C_SPIN] = options.spin ?? DEFAULT_SPIN;
    const seen = words[C_GEN] as number;
    const errors: { message?: string } = {};
    const workers: WorkerHandle[] = [];
    const ready: Promise<void>[] = [];
    try {
      for (let tid = 1; tid < threads; tid++) {
        const stackTop = arena.alloc(STACK_BYTES, 'a worker stack') + STACK_BYTES;
        const data = { module, memory, ctrl, tid, seen, stackTop };
        ready.push(
          spawn(data, workers, (message) => {
            errors.message ??= message;
          }),
        );
      }
      await Promise.all(ready);
    } catch (e) {
      Atomics.store(words, C_QUIT, 1);
      Atomics.add(words, C_GEN, 1);
      Atomics.notify(words, C_GEN);
      await Promise.all(workers.map((w) => w.terminate()));
      throw new ModelError('BACKEND', `wasm worker failed to start: ${(e as Error).message}`, {
        cause: e,
      });
    }
    return new ThreadPool(arena, ctrl, exports, workers, errors);
  }

  /**
   * Runs `ops` records at `prog` on every thread and returns when all are done.
   * @throws {ModelError} `BACKEND` when a worker trapped (the pool is then unusable).
   */
  run(prog: number, ops: number): void {
    if (this.#closed) throw new ModelError('BACKEND', 'thread pool is closed');
    if (this.#error) throw new ModelError('BACKEND', `wasm worker failed: ${this.#error}`);
    const words = this.#arena.i32(this.#ctrl, CONTROL_BYTES / 4);
    words[C_PROG] = prog;
    words[C_NOPS] = ops;
    if (this.#exports.kv_run(this.#ctrl) !== 0) {
      this.#error = this.#workerErrors.message ?? 'a worker trapped';
      throw new ModelError('BACKEND', `wasm worker failed: ${this.#error}`);
    }
  }

  /**
   * Wake-ups that `memory.atomic.notify` did not deliver: timed waits that timed out although
   * their word had changed, and parked workers that had to be woken a second time (each cost
   * up to a wait's timeout, 50 µs to 1 ms).
   */
  get lostWakeups(): number {
    return Atomics.load(this.#arena.i32(this.#ctrl, CONTROL_BYTES / 4), C_LOST);
  }

  /**
   * Blocking waits that returned, on every thread: what an idle pool costs. Programs add a few
   * each; between programs the count stays still, however long the pool idles.
   */
  get wakeups(): number {
    return Atomics.load(this.#arena.i32(this.#ctrl, CONTROL_BYTES / 4), C_WAKEUPS);
  }

  /** Stops the workers. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    const words = this.#arena.i32(this.#ctrl, CONTROL_BYTES / 4);
    Atomics.store(words, C_QUIT, 1);
    Atomics.add(words, C_GEN, 1);
    Atomics.notify(words, C_GEN);
    await Promise.all(this.#workers.map((w) => w.terminate()));
  }
}

async function spawn(
  data: Record<string, unknown>,
  workers: WorkerHandle[],
  onError: (message: string) => void,
): Promise<void> {
  const isNode = typeof process === 'object' && typeof process.versions?.node === 'string';
  if (isNode) {
    const { Worker } = await import('node:worker_threads');
    const w = new Worker(WORKER_SOURCE, { eval: true, workerData: data });
    // A worker waits in wasm between steps; it must not keep the process alive.
    w.unref();
    workers.push(w);
    return new Promise((resolve, reject) => {
      w.on('message', (m: { ready?: boolean; error?: string }) => {
        if (m.ready) resolve();
        if (m.error) {
          onError(m.error);
          reject(new Error(m.error));
        }
      });
      w.on('error', (e) => {
        onError(e.message);
        reject(e);
      });
    });
  }
  const w = browserWorker(blobUrl(WORKER_SOURCE));
  workers.push({
    terminate: () => {
      w.terminate();
      return undefined;
    },
  });
  return new Promise((resolve, reject) => {
    w.onmessage = (e) => {
      if (e.data.ready) resolve();
      if (e.data.error) {
        onError(e.data.error);
        reject(new Error(e.data.error));
      }
    };
    w.onerror = (e) => reject(new Error(e.message));
    w.postMessage(data);
  });
}
