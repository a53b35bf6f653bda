import type { Gpu } from '@kvasir/gpu';
import type { ModelConfig } from '../config.js';
import { ModelError } from '../errors.js';
import type { Executor, ExecutorContext } from '../execution/executor.js';
import {
  type ForwardBlockCopy,
  type ForwardPlan,
  normalizePlan,
} from '../execution/forward-plan.js';
import { checkKvBlockArgs, checkKvBlockCopies, kvBlockBytes } from '../execution/kv-blocks.js';
import { type KvCacheSpec, type KvFormatName, kvCacheSpec } from '../execution/kv-cache.js';
import type { KvGroups } from '../execution/kv-groups.js';
import { type ExecutorShard, shardedExecutor } from '../execution/sharded-executor.js';
import { checkExecutable } from '../execution/weights.js';
import type { CheckpointReader } from '../formats/checkpoint-reader.js';
import { createLoadProgress, type LoadProgress } from '../formats/checkpoint-stream.js';
import { openCheckpoint } from '../formats/open-checkpoint.js';
import {
  type BackendChoice,
  type BackendName,
  buildExecutor,
  checkBackendChoice,
  createExecutor,
} from './backend-select.js';
import { type DevicePlacement, resolvePlacement } from './placement.js';

/** Options of {@link loadModel}. */
export interface LoadModelOptions {
  /**
   * `'auto'` (default): WebGPU on a hardware adapter, else `'wasm'` (WebAssembly SIMD kernels
   * on worker threads), else `'cpu'`. `'webgpu'` fails without an adapter (a software one
   * such as llvmpipe is taken when chosen); `'cpu'` runs the reference kernels.
   */
  readonly backend?: BackendChoice;
  /** Threads of the wasm backend, the calling thread included (default: physical cores). */
  readonly threads?: number;
  /** KV cache element format (default `'f16'`). */
  readonly kvFormat?: KvFormatName;
  /** Physical KV blocks per layer. */
  readonly numBlocks: number;
  /** Tokens per block (default 16). */
  readonly blockSize?: number;
  /** Quantize weight matrices to int8 with group scales at load. */
  readonly weightQuant?: 'int8';
  /** int8 group size (default 32). */
  readonly groupSize?: number;
  /**
   * Storage of matrices (default `'auto'`: f32 stays f32, GGUF block tensors such as Q4_K
   * stay blocks on every backend, the rest f16).
   */
  readonly weightDtype?: 'auto' | 'f32' | 'f16';
  /** Show a progress bar on stderr (`true`), or report through a {@link LoadProgress}. */
  readonly progress?: boolean | LoadProgress;
  /**
   * An already-created `@kvasir/gpu` `Gpu` to run on (the app shares one device between the
   * model and other packages). Implies the WebGPU backend.
   */
  readonly gpu?: unknown;
  /** Close the reader after loading when the model opened it (default true for paths). */
  readonly closeReader?: boolean;
  /**
   * Split the model by layer over several devices, in layer order (see {@link DevicePlacement}
   * and `parseDevices`): each runs its layers and holds their KV cache; `backend`, `gpu` and
   * `threads` then apply to no device but through each placement's own fields.
   */
  readonly devices?: readonly DevicePlacement[];
  /**
   * KV cache groups (`@kvasir/kv-allocator`'s `kvGroupLayout` of the layers' windows): the
   * cache then holds `layersPerGroup` layer buffers of `numBlocks` pages, and every plan carries
   * each group's slots and block tables (`ForwardPlan.kvGroups`), so sliding-window layers
   * hold only their window. cpu and wasm; refused with `devices` and on WebGPU.
   */
  readonly kvGroups?: KvGroups;
}

/** A device a loaded model runs on, and its layers. */
export interface ModelDevice {
  readonly backend: BackendName;
  readonly firstLayer: number;
  readonly numLayers: number;
}

/** A loaded model ready to run batch plans over its paged KV cache. */
export interface Model {
  readonly config: ModelConfig;
  /** Which backend runs it (the first device's, when it is split over several). */
  readonly backend: BackendName;
  /** The devices it runs on in layer order (one unless it was loaded with `devices`). */
  readonly devices: readonly ModelDevice[];
  /** The KV cache layout (one buffer per layer). */
  readonly kvCache: KvCacheSpec;
  /**
   * Runs one step over a batch plan: block copies, then every layer for all the plan's tokens
   * (writing their K/V into the cache slots), then logits for `logitsIndices` only.
   * @returns logits `[logitsIndices.length][vocabSize]`, row-major.
   * @throws {ModelError} `INVALID_PLAN` (before any state changes), `BACKEND` on a device failure.
   */
  forward(plan: ForwardPlan): Promise<Float32Array>;
  /** Bytes of one physical KV block across all layers, scales included. */
  readonly kvBlockBytes: number;
  /**
   * Reads whole KV blocks (swap-out, offload), after every earlier call on this model: for each
   * id in order, every layer's contiguous block range in layer order (`kvBlockBytes` per block).
   * The bytes are the cache's own words, so they go back unchanged through {@link writeBlocks}
   * on any model with the same config, `kvFormat` and `blockSize`, CPU or WebGPU.
   * @throws {ModelError} `INVALID_ARGUMENT` for an id outside the cache; `BACKEND` on a device failure.
   */
  readBlocks(blockIds: readonly number[]): Promise<Uint8Array>;
  /**
   * Writes blocks read by {@link readBlocks} back (swap-in), ordered after every earlier call
   * and before every later one.
   * @throws {ModelError} `INVALID_ARGUMENT` (before anything is written) for an id outside the
   *   cache, a repeated id or `bytes` not `blockIds.length * kvBlockBytes` long; `BACKEND` on a
   *   device failure.
   */
  writeBlocks(blockIds: readonly number[], bytes: Uint8Array): Promise<void>;
  /**
   * Copies whole blocks on the device (copy-on-write): every layer's range of `src` into
   * `dst`, ordered after every earlier call and before every later one; every source is read
   * before any destination is written. The bytes never leave the backend's memory.
   * @throws {ModelError} `INVALID_ARGUMENT` (before anything is copied) for an id outside the
   *   cache or a destination named twice; `BACKEND` on a device failure.
   */
  copyBlocks(copies: readonly ForwardBlockCopy[]): Promise<void>;
  /** Frees the weights and the cache (and the device when the model created it). */
  destroy(): Promise<void>;
}

/**
 * Loads a Llama-family checkpoint (an open {@link CheckpointReader}, an HF directory or a GGUF
 * file path) onto the chosen backend, streaming weights in chunks, and allocates its paged KV
 * cache of `numBlocks` blocks per layer.
 *
 * @example
 * ```ts
 * const model = await loadModel('/models/SmolLM2-135M', { numBlocks: 256 });
 * const logits = await model.forward({
 *   tokenIds: Int32Array.of(1, 2, 3), positions: Int32Array.of(0, 1, 2),
 *   slotMapping: Int32Array.of(0, 1, 2), logitsIndices: Int32Array.of(2),
 *   rows: [{ queryStart: 0, queryLen: 3, contextLen: 3, blockTable: [0] }],
 * });
 * await model.destroy();
 * ```
 * @throws {ModelError} `INVALID_ARGUMENT` for bad options; `INVALID_CONFIG` for shapes the
 *   kernels cannot run; `BACKEND` when `backend: 'webgpu'` finds no adapter; reader errors.
 */
export async function loadModel(
  source: CheckpointReader | string,
  options: LoadModelOptions,
): Promise<Model> {
  const choice = options.backend ?? 'auto';
  checkBackendChoice(choice);
  if (options.weightQuant !== undefined && options.weightQuant !== 'int8') {
    throw new ModelError(
      'INVALID_ARGUMENT',
      `weightQuant must be 'int8', got '${String(options.weightQuant)}'`,
    );
  }
  const ownsReader = typeof source === 'string';
  const reader = typeof source === 'string' ? await openCheckpoint(source) : source;
  try {
    const config = reader.config;
    checkExecutable(config);
    const kv = kvCacheSpec(config, {
      kvFormat: options.kvFormat ?? 'f16',
      blockSize: options.blockSize ?? 16,
      numBlocks: options.numBlocks,
      ...(options.kvGroups ? { groups: options.kvGroups } : {}),
    });
    if (options.kvGroups && options.devices !== undefined) {
      throw new ModelError(
        'INVALID_ARGUMENT',
        'kvGroups needs the whole model on one device: it cannot be combined with devices',
      );
    }
    const progress =
      options.progress === true
        ? createLoadProgress({ bar: true, label: 'loading weights' })
        : options.progress === false
          ? undefined
          : options.progress;
    const weightOpts = {
      weightQuant: options.weightQuant,
      groupSize: options.groupSize,
      weightDtype: options.weightDtype,
      progress,
    };
    const ctx = { reader, kv, weights: weightOpts };
    const {
      backend,
      executor: exec,
      devices,
    } = options.devices === undefined
      ? {
          ...(await createExecutor(ctx, choice, options.gpu as Gpu | undefined, {
            threads: options.threads,
          })),
          devices: undefined,
        }
      : await createShards(ctx, options.devices);
    const limits = {
      vocabSize: config.vocabSize,
      numBlocks: kv.numBlocks,
      blockSize: kv.blockSize,
      maxPosition: config.maxPositionEmbeddings,
      ...(options.kvGroups ? { kvWindows: options.kvGroups.windows } : {}),
    };
    let destroyed = false;
    // Block transfers and steps share the cache: run every call in call order.
    let tail: Promise<unknown> = Promise.resolve();
    const serial = <T>(f: () => Promise<T>): Promise<T> => {
      if (destroyed) return Promise.reject(new ModelError('BACKEND', 'model was destroyed'));
      const run = tail.then(f);
      tail = run.catch(() => undefined);
      return run;
    };
    return {
      config,
      backend,
      devices: devices ?? [{ backend, firstLayer: 0, numLayers: config.numLayers }],
      kvCache: kv,
      forward(plan) {
        if (destroyed) return Promise.reject(new ModelError('BACKEND', 'model was destroyed'));
        try {
          const p = normalizePlan(plan, limits);
          return serial(() => exec.forward(p));
        } catch (e) {
          return Promise.reject(e);
        }
      },
      kvBlockBytes: kvBlockBytes(kv),
      readBlocks(blockIds) {
        try {
          checkKvBlockArgs(kv, blockIds);
          const ids = [...blockIds];
          return serial(() => exec.blocks.read(ids));
        } catch (e) {
          return Promise.reject(e);
        }
      },
      writeBlocks(blockIds, bytes) {
        try {
          checkKvBlockArgs(kv, blockIds, bytes);
          const ids = [...blockIds];
          return serial(() => exec.blocks.write(ids, bytes));
        } catch (e) {
          return Promise.reject(e);
        }
      },
      copyBlocks(copies) {
        try {
          checkKvBlockCopies(kv, copies);
          const list = copies.map(({ src, dst }) => ({ src, dst }));
          return serial(() => exec.blocks.copy(list));
        } catch (e) {
          return Promise.reject(e);
        }
      },
      async destroy() {
        if (destroyed) return;
        destroyed = true;
        await tail;
        await exec.destroy();
      },
    };
  } finally {
    if (ownsReader && options.closeReader !== false) await reader.close();
  }
}

/**
 * One executor per device, each over its slice of the layers, joined into one.
 * @throws {ModelError} `INVALID_ARGUMENT` for a bad placement; what each backend throws.
 */
async function createShards(
  ctx: ExecutorContext,
  placement: readonly DevicePlacement[],
): Promise<{ backend: BackendName; executor: Executor; devices: ModelDevice[] }> {
  const slices = resolvePlacement(placement, ctx.reader.config.numLayers);
  const shards: ExecutorShard[] = [];
  try {
    for (const [i, d] of placement.entries()) {
      const slice = slices[i] as (typeof slices)[number];
      const kv = { ...ctx.kv, numLayers: slice.numLayers };
      const executor = (await buildExecutor({ ...ctx, kv, layers: slice }, d.backend, {
        gpu: d.gpu as Gpu | undefined,
        required: true,
        threads: d.threads,
        adapter: d.adapter,
      })) as Executor;
      shards.push({ executor, slice, kv });
    }
  } catch (e) {
    await Promise.allSettled(shards.map((s) => s.executor.destroy()));
    throw e;
  }
  const devices = placement.map((d, i) => ({
    backend: d.backend,
    firstLayer: (slices[i] as (typeof slices)[number]).firstLayer,
    numLayers: (slices[i] as (typeof slices)[number]).numLayers,
  }));
  const only = shards[0] as ExecutorShard;
  return {
    backend: placement[0]?.backend as BackendName,
    // One device needs no joining.
    executor: shards.length === 1 ? only.executor : shardedExecutor(shards),
    devices,
  };
}
