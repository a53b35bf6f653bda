import { availableParallelism } from 'node:os';
import { Worker } from 'node:worker_threads';
import { OffloadError } from './errors.js';
import {
  XXH64_CHUNK,
  XXH64_DATA,
  type Xxh64Lanes,
  xxh64,
  xxh64Finish,
  xxh64InitLanes,
  xxh64WasmBytes,
} from './xxh64.js';

/** How many worker threads hash payloads: a count (0: always on the calling thread) or `'auto'`. */
export type ChecksumThreads = number | 'auto';

/** Default smallest payload hashed on a worker thread: below it a message costs more than it saves. */
export const DEFAULT_CHECKSUM_MIN_BYTES = 256 * 1024;

/**
 * Threads that `'auto'` asks for: none on a machine of two cores or fewer (a worker would only
 * compete with the I/O and the caller for the same cores), otherwise one per spare core up to 8.
 */
export function autoChecksumThreads(cores: number = availableParallelism()): number {
  return cores > 2 ? Math.min(8, cores - 1) : 0;
}

/**
 * The worker count a `checksumThreads` option stands for (`'auto'` or absent: {@link autoChecksumThreads}).
 * @throws {OffloadError} INVALID_OPTIONS unless `'auto'` or an integer in 0..64.
 */
export function resolveChecksumThreads(threads: ChecksumThreads | undefined): number {
  if (threads === undefined || threads === 'auto') return autoChecksumThreads();
  if (!Number.isInteger(threads) || threads < 0 || threads > 64) {
    throw new OffloadError(
      'INVALID_OPTIONS',
      "checksumThreads must be 'auto' or an integer 0..64",
      {
        details: { checksumThreads: threads },
      },
    );
  }
  return threads;
}

// The worker: instantiates the same stripe module and runs the stripe pass over the bytes it
// is given (a transferred ArrayBuffer, handed back) or over a byte range of a file the caller
// holds open (worker threads share the process's descriptors), returning the four lanes, or
// `short` when the file ends before the range does. Inline CommonJS source, so there is no
// worker file to locate from dist, CJS, ESM or a single-file bundle.
const WORKER_SOURCE = `
'use strict';
const { parentPort, workerData } = require('node:worker_threads');
const fs = require('node:fs');
const exp = new WebAssembly.Instance(new WebAssembly.Module(workerData.wasm), {}).exports;
const mem = new Uint8Array(exp.mem.buffer);
const state = new BigUint64Array(exp.mem.buffer, 0, 4);
const CHUNK = workerData.chunk;
const DATA = workerData.data;
parentPort.on('message', (m) => {
  const back = m.buf instanceof ArrayBuffer ? [m.buf] : [];
  try {
    for (let i = 0; i < 4; i++) state[i] = m.init[i];
    const body = m.len - (m.len % 32);
    if (m.fd !== undefined) {
      // Bytes in a file the caller holds open: read from the page cache straight into the
      // module's memory (positioned reads: the caller's file offset is untouched).
      for (let p = 0; p < body; ) {
        const n = Math.min(CHUNK, body - p);
        for (let got = 0; got < n; ) {
          const r = fs.readSync(m.fd, mem, DATA + got, n - got, m.offset + p + got);
          if (r === 0) {
            parentPort.postMessage({ id: m.id, buf: m.buf, short: true }, back);
            return;
          }
          got += r;
        }
        exp.stripes(DATA, DATA + n);
        p += n;
      }
    } else {
      const data = new Uint8Array(m.buf, m.offset, m.len);
      for (let p = 0; p < body; ) {
        const n = Math.min(CHUNK, body - p);
        mem.set(data.subarray(p, p + n), DATA);
        exp.stripes(DATA, DATA + n);
        p += n;
      }
    }
    parentPort.postMessage({ id: m.id, buf: m.buf, lanes: [state[0], state[1], state[2], state[3]] }, back);
  } catch (e) {
    parentPort.postMessage({ id: m.id, buf: m.buf, error: String(e) }, back);
  }
});
`;

/** A worker's answer: the stripe lanes, or `undefined` when the file was shorter than the range. */
interface Done {
  readonly buf: ArrayBufferLike | undefined;
  readonly lanes: Xxh64Lanes | undefined;
}

interface Job {
  readonly resolve: (r: Done) => void;
  readonly reject: (e: unknown) => void;
}

interface Slot {
  readonly worker: Worker;
  readonly jobs: Map<number, Job>;
  dead: boolean;
}

interface Reply {
  readonly id: number;
  readonly buf: ArrayBufferLike | undefined;
  readonly lanes?: Xxh64Lanes;
  readonly short?: true;
  readonly error?: string;
}

/**
 * A few worker threads that compute XXH64 (seed 0) of large payloads beside the caller's thread,
 * so a store's checksums overlap its I/O and each other on a machine with spare cores. Workers
 * start on first use, are unreferenced while idle (they never keep the process alive) and end
 * on {@link ChecksumPool.close}. A worker that fails takes only its own jobs with it: they
 * reject with `OffloadError` `CHECKSUM_WORKER` (the store counts an error and answers a miss or
 * does not store), and the next job starts a new worker.
 */
export class ChecksumPool {
  readonly threads: number;
  private readonly slots: Slot[] = [];
  private nextId = 0;
  private closed = false;

  /**
   * @param threads workers at most (1 or more).
   * @param source the worker's code (tests substitute a failing one).
   */
  constructor(
    threads: number,
    private readonly source: string = WORKER_SOURCE,
  ) {
    this.threads = threads;
  }

  /** Live workers (started on demand, up to `threads`). */
  get size(): number {
    return this.slots.length;
  }

  private spawn(): Slot {
    const worker = new Worker(this.source, {
      eval: true,
      workerData: { wasm: xxh64WasmBytes(), chunk: XXH64_CHUNK, data: XXH64_DATA },
    });
    worker.unref();
    const slot: Slot = { worker, jobs: new Map(), dead: false };
    worker.on('message', (r: Reply) => {
      const job = slot.jobs.get(r.id);
      if (job === undefined) return;
      slot.jobs.delete(r.id);
      if (slot.jobs.size === 0) worker.unref();
      if (r.lanes !== undefined || r.short) job.resolve({ buf: r.buf, lanes: r.lanes });
      else job.reject(this.failure(`checksum worker failed: ${r.error ?? 'no result'}`));
    });
    const fail = (why: string) => {
      if (slot.dead) return;
      slot.dead = true;
      const i = this.slots.indexOf(slot);
      if (i >= 0) this.slots.splice(i, 1);
      const err = this.closed
        ? new OffloadError('CLOSED', 'the store was closed while a checksum was computed')
        : this.failure(`checksum worker ${why}`);
      for (const job of slot.jobs.values()) job.reject(err);
      slot.jobs.clear();
      void worker.terminate().catch(() => undefined);
    };
    worker.on('error', (e) => fail(`failed: ${String(e)}`));
    worker.on('messageerror', (e) => fail(`sent an unreadable message: ${String(e)}`));
    worker.on('exit', (code) => fail(`exited (code ${code})`));
    this.slots.push(slot);
    return slot;
  }

  private failure(message: string): OffloadError {
    return new OffloadError('CHECKSUM_WORKER', message);
  }

  // The least busy worker; a new one while fewer than `threads` run and all have work.
  private pick(): Slot {
    let best: Slot | undefined;
    for (const s of this.slots) if (best === undefined || s.jobs.size < best.jobs.size) best = s;
    if (best === undefined || (best.jobs.size > 0 && this.slots.length < this.threads)) {
      return this.spawn();
    }
    return best;
  }

  private run(
    buf: ArrayBufferLike | undefined,
    offset: number,
    len: number,
    transfer: boolean,
    fd?: number,
  ): Promise<Done> {
    if (this.closed) {
      return Promise.reject(new OffloadError('CLOSED', 'the checksum pool was closed'));
    }
    return new Promise((resolve, reject) => {
      let slot: Slot;
      try {
        slot = this.pick();
      } catch (e) {
        reject(this.failure(`could not start a checksum worker: ${String(e)}`));
        return;
      }
      const id = this.nextId++;
      slot.jobs.set(id, { resolve, reject });
      if (slot.jobs.size === 1) slot.worker.ref(); // a pending result must keep the process alive
      try {
        const msg = { id, buf, fd, offset, len, init: xxh64InitLanes(0n) };
        slot.worker.postMessage(msg, transfer ? [buf as ArrayBuffer] : []);
      } catch (e) {
        slot.jobs.delete(id);
        if (slot.jobs.size === 0) slot.worker.unref();
        reject(this.failure(`could not send to the checksum worker: ${String(e)}`));
      }
    });
  }

  /**
   * XXH64 (seed 0) of a buffer the caller owns and gives up for the duration: its ArrayBuffer
   * (which must hold nothing else the caller needs, and not be a pooled `Buffer`'s) is moved to
   * a worker and back without a copy. Resolves to the digest and a new view of the same bytes;
   * `data` itself is detached meanwhile.
   * @throws {OffloadError} CHECKSUM_WORKER if the worker fails; CLOSED after `close()`.
   */
  async hashTransfer(data: Uint8Array): Promise<{ sum: bigint; data: Buffer }> {
    const { byteOffset, byteLength } = data;
    const { buf, lanes } = await this.run(data.buffer, byteOffset, byteLength, true);
    if (lanes === undefined) throw this.failure('checksum worker answered without a digest');
    const back = Buffer.from(buf as ArrayBuffer, byteOffset, byteLength);
    return { sum: xxh64Finish(back, 0n, lanes), data: back };
  }

  /**
   * XXH64 (seed 0) of the `data.byteLength` bytes at `offset` of the open file `fd`, which hold
   * the same bytes as `data` (the caller has just written `data` there, or read it from there):
   * the worker reads the file (from the page cache, straight into its hashing memory) for the
   * stripe pass, and this thread finishes with the last bytes of `data`. Nothing is copied on
   * this thread. The caller keeps `fd` open, and the range unchanged, until this settles.
   * @returns the digest, or `undefined` when the file ends before the range does (it changed:
   *   not a worker failure).
   * @throws {OffloadError} CHECKSUM_WORKER if the worker fails; CLOSED after `close()`.
   */
  async hashFile(fd: number, offset: number, data: Uint8Array): Promise<bigint | undefined> {
    const { lanes } = await this.run(undefined, offset, data.byteLength, false, fd);
    return lanes === undefined ? undefined : xxh64Finish(data, 0n, lanes);
  }

  /** Ends every worker; pending and later jobs reject with `CLOSED`. Idempotent. */
  async close(): Promise<void> {
    this.closed = true;
    const slots = this.slots.splice(0);
    await Promise.all(
      slots.map(async (s) => {
        const err = new OffloadError(
          'CLOSED',
          'the store was closed while a checksum was computed',
        );
        for (const job of s.jobs.values()) job.reject(err);
        s.jobs.clear();
        s.dead = true;
        await s.worker.terminate().catch(() => undefined);
      }),
    );
  }
}

/** The worker's source (for tests that derive a failing worker from it). */
export const CHECKSUM_WORKER_SOURCE = WORKER_SOURCE;

/** Worker failures in a row after which a {@link Checksummer} hashes inline for good. */
export const GIVE_UP_AFTER = 3;

/**
 * Where a store computes payload checksums: inline below `minBytes` or without a pool, on the
 * pool above. Both give the same digest as {@link xxh64}.
 */
export class Checksummer {
  private pool: ChecksumPool | undefined;
  private failuresInARow = 0;
  private gaveUp = false;

  /**
   * @param threads resolved worker count (0: always inline).
   * @param minBytes smallest payload sent to a worker.
   */
  constructor(
    readonly threads: number,
    readonly minBytes: number,
  ) {
    this.pool = threads > 0 ? new ChecksumPool(threads) : undefined;
  }

  /** The pool, if any (for tests and diagnostics; tests may substitute one). */
  get workers(): ChecksumPool | undefined {
    return this.pool;
  }
  set workers(pool: ChecksumPool | undefined) {
    this.pool = pool;
  }

  /** Whether a payload of `bytes` goes to a worker. */
  offloads(bytes: number): boolean {
    return this.pool !== undefined && bytes >= this.minBytes;
  }

  /**
   * XXH64 of `data`, which the open file `fd` holds at `offset` (see
   * {@link ChecksumPool.hashFile}); inline when not offloaded.
   * @returns the digest, or `undefined` when the file turned out shorter than `data`.
   * @throws {OffloadError} CHECKSUM_WORKER, CLOSED.
   */
  async ofFile(fd: number, offset: number, data: Uint8Array): Promise<bigint | undefined> {
    const pool = this.pool;
    if (pool === undefined || data.byteLength < this.minBytes) return xxh64(data);
    return this.watch(pool, pool.hashFile(fd, offset, data));
  }

  /**
   * Whether the workers failed so often in a row ({@link GIVE_UP_AFTER} times) that this
   * store now hashes everything inline (e.g. where worker threads cannot start at all).
   */
  get inlineAfterFailures(): boolean {
    return this.gaveUp;
  }

  // Counts failures in a row; past GIVE_UP_AFTER the pool is dropped and hashing goes inline
  // for good, so a machine where workers cannot run loses a few blocks, not the tier.
  private async watch<R>(pool: ChecksumPool, job: Promise<R>): Promise<R> {
    try {
      const r = await job;
      this.failuresInARow = 0;
      return r;
    } catch (e) {
      if (e instanceof OffloadError && e.code === 'CHECKSUM_WORKER') {
        this.failuresInARow++;
        if (this.failuresInARow >= GIVE_UP_AFTER && this.pool === pool) {
          this.gaveUp = true;
          this.pool = undefined;
          void pool.close();
        }
      }
      throw e;
    }
  }

  /**
   * XXH64 of a buffer this store allocated itself (sole owner of its ArrayBuffer): moved to a
   * worker and back. Use the returned view; `data` may be detached.
   * @throws {OffloadError} CHECKSUM_WORKER, CLOSED.
   */
  async ofOwned<T extends Uint8Array>(data: T): Promise<{ sum: bigint; data: T | Buffer }> {
    const pool = this.pool;
    if (pool === undefined || data.byteLength < this.minBytes) return { sum: xxh64(data), data };
    return this.watch(pool, pool.hashTransfer(data));
  }

  /** Ends the workers. Idempotent. */
  async close(): Promise<void> {
    const pool = this.pool;
    this.pool = undefined;
    await pool?.close();
  }
}
