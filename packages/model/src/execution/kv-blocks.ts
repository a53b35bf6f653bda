import { ModelError } from '../errors.js';
import type { ForwardBlockCopy } from './forward-plan.js';
import type { KvCacheSpec } from './kv-cache.js';

/**
 * Whole-block KV transfer (swap preemption, offload): moves the bytes of physical blocks out
 * of and back into the per-layer caches, scales included, and copies blocks inside them. The packed form of blocks
 * `ids = [b0, b1, ...]` is, for each block in that order, every layer's contiguous block range
 * in layer order, so each block is {@link kvBlockBytes} bytes and block `i` starts at byte
 * `i * kvBlockBytes(spec)`.
 * @internal
 */
export interface KvBlockIo {
  read(blockIds: readonly number[]): Promise<Uint8Array>;
  write(blockIds: readonly number[], bytes: Uint8Array): Promise<void>;
  /**
   * Copies whole blocks inside the cache (copy-on-write), every layer, without the bytes
   * leaving the device: every source is read before any destination is written.
   */
  copy(copies: readonly ForwardBlockCopy[]): Promise<void>;
}

/** Bytes of one physical block across all layers (scales included). */
export function kvBlockBytes(spec: KvCacheSpec): number {
  return spec.numLayers * spec.blockWords * 4;
}

/**
 * Checks block ids (and, for writes, the byte count) before anything moves.
 * @throws {ModelError} `INVALID_ARGUMENT` for an id outside `[0, numBlocks)`, a repeated id in
 *   a write, or `bytes` of the wrong length.
 */
export function checkKvBlockArgs(
  spec: KvCacheSpec,
  blockIds: readonly number[],
  bytes?: Uint8Array,
): void {
  for (const id of blockIds) {
    if (!(Number.isInteger(id) && id >= 0 && id < spec.numBlocks)) {
      throw new ModelError(
        'INVALID_ARGUMENT',
        `block id ${String(id)} is outside the cache's ${spec.numBlocks} blocks`,
      );
    }
  }
  if (bytes === undefined) return;
  if (!(bytes instanceof Uint8Array)) {
    throw new ModelError('INVALID_ARGUMENT', 'block bytes must be a Uint8Array');
  }
  // Writing one block twice from one call has no defined winner.
  if (new Set(blockIds).size !== blockIds.length) {
    throw new ModelError('INVALID_ARGUMENT', 'writeBlocks got a block id more than once');
  }
  const want = blockIds.length * kvBlockBytes(spec);
  if (bytes.byteLength !== want) {
    throw new ModelError(
      'INVALID_ARGUMENT',
      `writeBlocks of ${blockIds.length} blocks needs ${want} bytes (${kvBlockBytes(spec)} per block), got ${bytes.byteLength}`,
    );
  }
}

/**
 * Checks block copies before anything moves.
 * @throws {ModelError} `INVALID_ARGUMENT` for an entry that is not `{ src, dst }` of ids inside
 *   `[0, numBlocks)`, or a destination named twice (no defined winner).
 */
export function checkKvBlockCopies(spec: KvCacheSpec, copies: readonly ForwardBlockCopy[]): void {
  if (!Array.isArray(copies)) {
    throw new ModelError('INVALID_ARGUMENT', 'block copies must be an array of { src, dst }');
  }
  const dsts = new Set<number>();
  for (const cp of copies) {
    if (typeof cp !== 'object' || cp === null) {
      throw new ModelError('INVALID_ARGUMENT', 'block copies must be an array of { src, dst }');
    }
    checkKvBlockArgs(spec, [cp.src, cp.dst]);
    if (dsts.has(cp.dst)) {
      throw new ModelError('INVALID_ARGUMENT', `copyBlocks writes block ${cp.dst} more than once`);
    }
    dsts.add(cp.dst);
  }
}

/**
 * Copies blocks inside per-layer host caches (the CPU and wasm backends'), every source read
 * before any destination is written.
 * @internal
 */
export function copyHostBlocks(
  spec: KvCacheSpec,
  caches: readonly Uint32Array[],
  copies: readonly ForwardBlockCopy[],
): void {
  if (copies.length === 0) return;
  const bw = spec.blockWords;
  const written = new Set(copies.map((cp) => cp.dst));
  // In place unless a source is also written: then its old words are set aside first.
  const staged = copies.some((cp) => written.has(cp.src));
  for (const cache of caches) {
    if (!staged) {
      for (const cp of copies) cache.copyWithin(cp.dst * bw, cp.src * bw, (cp.src + 1) * bw);
      continue;
    }
    const sources = copies.map((cp) => cache.slice(cp.src * bw, (cp.src + 1) * bw));
    for (const [i, cp] of copies.entries()) cache.set(sources[i] as Uint32Array, cp.dst * bw);
  }
}

/** Block transfer over the CPU backend's per-layer `Uint32Array` caches. @internal */
export function cpuKvBlockIo(spec: KvCacheSpec, caches: readonly Uint32Array[]): KvBlockIo {
  const bw = spec.blockWords;
  return {
    async read(blockIds) {
      const out = new Uint32Array(blockIds.length * spec.numLayers * bw);
      let o = 0;
      for (const id of blockIds) {
        for (const cache of caches) {
          out.set(cache.subarray(id * bw, (id + 1) * bw), o);
          o += bw;
        }
      }
      return new Uint8Array(out.buffer);
    },
    async write(blockIds, bytes) {
      // Copy through bytes: the caller's view need not be 4-byte aligned.
      let o = bytes.byteOffset;
      for (const id of blockIds) {
        for (const cache of caches) {
          new Uint8Array(cache.buffer, cache.byteOffset + id * bw * 4, bw * 4).set(
            new Uint8Array(bytes.buffer, o, bw * 4),
          );
          o += bw * 4;
        }
      }
    },
    async copy(copies) {
      copyHostBlocks(spec, caches, copies);
    },
  };
}

const MAP_READ = 0x1;
const COPY_SRC = 0x4;
const COPY_DST = 0x8;

/**
 * Encodes block copies on every layer's cache buffer through `staging` (at least
 * `copies.length × blockBytes`, `COPY_SRC | COPY_DST`): a buffer cannot be copied onto itself,
 * so the sources go out first and then into place, which also reads every source before any
 * destination is written.
 * @internal
 */
export function encodeBlockCopies(
  enc: GPUCommandEncoder,
  caches: readonly GPUBuffer[],
  blockBytes: number,
  copies: readonly ForwardBlockCopy[],
  staging: GPUBuffer,
): void {
  const bb = blockBytes;
  for (const cache of caches) {
    for (const [i, cp] of copies.entries()) {
      enc.copyBufferToBuffer(cache, cp.src * bb, staging, i * bb, bb);
    }
    for (const [i, cp] of copies.entries()) {
      enc.copyBufferToBuffer(staging, i * bb, cache, cp.dst * bb, bb);
    }
  }
}

/**
 * Block transfer over the WebGPU backend's per-layer cache buffers (which need `COPY_SRC` and
 * `COPY_DST`): reads copy every range into one staging buffer (several when the device's
 * buffer size limit asks) and map it once; writes go through `queue.writeBuffer`, ordered
 * before any later submission.
 * @internal
 */
export function gpuKvBlockIo(
  device: GPUDevice,
  spec: KvCacheSpec,
  caches: readonly GPUBuffer[],
): KvBlockIo {
  const bb = spec.blockWords * 4;
  const perBlock = kvBlockBytes(spec);
  const checked = async <T>(what: string, f: () => Promise<T>): Promise<T> => {
    device.pushErrorScope('validation');
    device.pushErrorScope('out-of-memory');
    let result: T | undefined;
    let thrown: unknown;
    try {
      result = await f();
    } catch (e) {
      thrown = e;
    }
    const oom = await device.popErrorScope();
    const invalid = await device.popErrorScope();
    const err = oom ?? invalid;
    if (thrown !== undefined || err) {
      const msg = err ? err.message : String((thrown as Error)?.message ?? thrown);
      throw new ModelError('BACKEND', `WebGPU error in ${what}: ${msg}`, { cause: thrown });
    }
    return result as T;
  };
  return {
    read(blockIds) {
      return checked('readBlocks', async () => {
        const out = new Uint8Array(blockIds.length * perBlock);
        if (blockIds.length === 0) return out;
        const maxBlocks = Math.max(1, Math.floor(device.limits.maxBufferSize / perBlock));
        for (let first = 0; first < blockIds.length; first += maxBlocks) {
          const ids = blockIds.slice(first, first + maxBlocks);
          const size = ids.length * perBlock;
          const staging = device.createBuffer({
            label: 'kv-blocks.readback',
            size,
            usage: MAP_READ | COPY_DST,
          });
          try {
            const enc = device.createCommandEncoder({ label: 'kv-blocks.read' });
            for (const [i, id] of ids.entries()) {
              for (const [l, cache] of caches.entries()) {
                enc.copyBufferToBuffer(cache, id * bb, staging, i * perBlock + l * bb, bb);
              }
            }
            device.queue.submit([enc.finish()]);
            await staging.mapAsync(MAP_READ, 0, size);
            out.set(new Uint8Array(staging.getMappedRange(0, size)), first * perBlock);
            staging.unmap();
          } finally {
            staging.destroy();
          }
        }
        return out;
      });
    },
    write(blockIds, bytes) {
      return checked('writeBlocks', async () => {
        let o = 0;
        for (const id of blockIds) {
          for (const cache of caches) {
            device.queue.writeBuffer(cache, id * bb, bytes, o, bb);
            o += bb;
          }
        }
        await device.queue.onSubmittedWorkDone();
      });
    },
    copy(copies) {
      return checked('copyBlocks', async () => {
        if (copies.length === 0) return;
        const staging = device.createBuffer({
          label: 'kv-blocks.copy',
          size: copies.length * bb,
          usage: COPY_SRC | COPY_DST,
        });
        try {
          const enc = device.createCommandEncoder({ label: 'kv-blocks.copy' });
          encodeBlockCopies(enc, caches, bb, copies, staging);
          device.queue.submit([enc.finish()]);
          await device.queue.onSubmittedWorkDone();
        } finally {
          staging.destroy();
        }
      });
    },
  };
}
