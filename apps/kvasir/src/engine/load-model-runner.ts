import { createHash } from 'node:crypto';
import { availableParallelism } from 'node:os';
import { basename } from 'node:path';
import { createGpu, type Gpu, type GpuBackendOption } from '@kvasir/gpu';
import type { BlockCopy, KvLayout } from '@kvasir/kv-allocator';
import {
  type CheckpointReader,
  defaultThreadCount,
  type KvFormatName,
  kvBlockBytes,
  kvCacheSpec,
  loadModel,
  type ModelConfig,
  ModelError,
  ModelTokenizer,
  openCheckpoint,
  WASM32_MAX_BYTES,
  wasmFeatures,
} from '@kvasir/model';
import type { BatchPlan } from '@kvasir/scheduler';
import type { ChatMessage } from '@kvasir/server';
import type { EngineConfig } from '../config.js';
import { KvasirAppError } from '../errors.js';
import { probeGpu } from './gpu-probe.js';
import type { ModelRunner, TextCodec } from './model-runner.js';

/** A model whose weights are loaded, before its KV cache is allocated. */
export interface LoadedModel {
  readonly modelId: string;
  readonly weightDigest: string;
  readonly weightBytes: number;
  readonly maxModelLen: number;
  readonly kvLayout: KvLayout;
  /** Largest storage binding one layer's cache may use. */
  readonly maxBindingBytes: number;
  /** Backend and adapter, in words. */
  readonly backend: string;
  /** Where weights and KV cache live: a WebGPU device, or host memory (the CPU backend). */
  readonly device: 'webgpu' | 'cpu';
  /** Scratch memory one step needs at this batch size. */
  activationBytes(maxTokens: number, maxSeqs: number): number;
  /** Allocates the paged KV cache and returns the runner the engine drives. */
  allocate(numBlocks: number): Promise<ModelRunner>;
  /** Releases the weights and the device when no runner was allocated. */
  dispose(): Promise<void>;
}

/** @kvasir/model's name of each `--kv-dtype`. */
const KV_FORMATS: Readonly<Record<EngineConfig['kvDtype'], KvFormatName>> = {
  f32: 'f32',
  f16: 'f16',
  int8: 'int8',
  'int8-h8': 'int8-h8',
  'fp8-e4m3': 'fp8-e4m3',
  'fp8-e5m2': 'fp8-e5m2',
  int4: 'int4-g32',
  'int4-h32': 'int4-g32-h32',
};

const GPU_BACKENDS: readonly string[] = ['vulkan', 'metal', 'd3d12', 'opengles'];

/**
 * Opens a WebGPU device through @kvasir/gpu: on `backend` when given (the one a probe found, so
 * that Dawn does not try, and warn about, the others), else hardware first, then the software
 * adapter.
 */
export async function openGpu(backend?: string): Promise<Gpu> {
  try {
    return await createGpu({
      label: 'kvasir',
      ...(backend !== undefined && GPU_BACKENDS.includes(backend)
        ? { backend: backend as GpuBackendOption }
        : {}),
    });
  } catch (error) {
    throw new KvasirAppError('MODEL_LOAD', `no WebGPU device: ${(error as Error).message}`, {
      cause: error,
    });
  }
}

/** The engine's text side over a @kvasir/model tokenizer. */
export function codecFor(tokenizer: ModelTokenizer): TextCodec {
  return {
    encode: (text) => tokenizer.encode(text),
    applyChatTemplate: (messages: readonly ChatMessage[]) =>
      tokenizer.encodeChat(messages.map((m) => ({ role: m.role, content: m.content }))),
    decoder: () => tokenizer.createDetokenizer({ skipSpecialTokens: true }),
    tokenText: (id) => tokenizer.decode([id]),
  };
}

/**
 * The KV layout the allocator and memory plan count with, from @kvasir/model's cache layout:
 * the row words per element and the scale words per slab spread over its tokens, so that
 * `kvBytesPerBlock` equals the model's bytes per block exactly (block sizes are powers of two).
 * @throws KvasirAppError `INVALID_CONFIG` for a format the model's shape cannot store.
 */
export function kvLayoutFor(c: ModelConfig, kvFormat: KvFormatName, blockSize: number): KvLayout {
  let spec: ReturnType<typeof kvCacheSpec>;
  try {
    spec = kvCacheSpec(c, { kvFormat, blockSize, numBlocks: 1 });
  } catch (error) {
    throw new KvasirAppError('INVALID_CONFIG', `--kv-dtype: ${(error as Error).message}`, {
      cause: error,
    });
  }
  return {
    numLayers: c.numLayers,
    numKvHeads: c.numKvHeads,
    headDim: c.headDim,
    blockSize,
    bytesPerElement: (spec.rowWords * 4) / c.headDim,
    scaleBytesPerTokenHead: ((spec.slabWords - blockSize * spec.rowWords) * 4) / blockSize,
  };
}

/** SHA-256 over every tensor's stored bytes in name order (offload namespaces key on it). */
async function weightDigest(reader: CheckpointReader): Promise<string> {
  const hash = createHash('sha256');
  for (const name of [...reader.tensors.keys()].sort()) {
    hash.update(name);
    for await (const chunk of reader.readChunks(name)) hash.update(chunk);
  }
  return `sha256:${hash.digest('hex')}`;
}

function asAppError(error: unknown, what: string): KvasirAppError {
  if (error instanceof KvasirAppError) return error;
  const code =
    ModelError.isInstance(error) &&
    (error.code === 'INVALID_CONFIG' || error.code === 'INVALID_ARGUMENT')
      ? 'INVALID_CONFIG'
      : 'MODEL_LOAD';
  return new KvasirAppError(code, `${what}: ${(error as Error).message}`, { cause: error });
}

/**
 * Loads a checkpoint (HF directory or `.gguf`) for @kvasir/model's forward pass on the
 * configured backend. `auto` takes a hardware GPU when there is one and the wasm backend
 * otherwise (on a software adapter it is faster), or the CPU reference where WebAssembly has
 * no SIMD or shared memory.
 * @throws KvasirAppError `MODEL_LOAD` when the checkpoint or backend cannot be used;
 *   `INVALID_CONFIG` for a KV dtype the model cannot store.
 */
export async function loadModelRunner(path: string, config: EngineConfig): Promise<LoadedModel> {
  let gpu: Gpu | undefined;
  if (config.backend === 'auto' || config.backend === 'webgpu') {
    // Dawn is loaded into this process only when there is an adapter to use: its native
    // warnings cannot be kept off stderr here, only in the probe's child process.
    const found = await probeGpu();
    if (process.env.KVASIR_DEBUG && found.log) process.stderr.write(found.log);
    if (config.backend === 'webgpu') {
      if (!found.ok) {
        throw new KvasirAppError('MODEL_LOAD', `no WebGPU device: ${found.message}`);
      }
      gpu = await openGpu(found.probe.backend);
    } else if (found.ok && !found.probe.isSoftware) {
      gpu = await openGpu(found.probe.backend).catch(() => undefined);
    }
  }
  const releaseGpu = () => {
    gpu?.destroy();
    gpu = undefined;
  };
  const kvFormat = KV_FORMATS[config.kvDtype];
  let reader: CheckpointReader;
  let tokenizer: ModelTokenizer;
  let digest: string;
  try {
    reader = await openCheckpoint(path);
    try {
      tokenizer = await ModelTokenizer.load(path, reader.config.eosTokenIds);
      digest = await weightDigest(reader);
    } catch (error) {
      await reader.close();
      throw error;
    }
  } catch (error) {
    releaseGpu();
    throw new KvasirAppError(
      'MODEL_LOAD',
      `cannot load model ${path}: ${(error as Error).message}`,
      { cause: error },
    );
  }
  let closed = false;
  const closeReader = async () => {
    if (!closed) await reader.close();
    closed = true;
  };
  const c = reader.config;
  let kvLayout: KvLayout;
  try {
    kvLayout = kvLayoutFor(c, kvFormat, config.blockSize);
  } catch (error) {
    releaseGpu();
    await closeReader();
    throw error;
  }
  // The kernels attend over the whole context. A sliding-window model (Mistral, Qwen2 with
  // use_sliding_window) attends over its last `slidingWindow` tokens only, which is the same
  // thing while the context fits the window: the window bounds the context instead of the
  // model silently computing something else past it.
  const maxModelLen = Math.min(
    config.maxModelLen ?? c.maxPositionEmbeddings,
    c.maxPositionEmbeddings,
    c.slidingWindow ?? Number.POSITIVE_INFINITY,
  );
  const modelId = basename(path).replace(/\.gguf$/i, '');
  const onGpu = gpu;
  if (onGpu && config.blockSize < 8) {
    releaseGpu();
    await closeReader();
    throw new KvasirAppError(
      'INVALID_CONFIG',
      `--block-size: ${config.blockSize} runs on the cpu and wasm backends only; WebGPU's kernels take 8, 16 or 32`,
    );
  }
  const wasm = wasmFeatures();
  const onWasm =
    !onGpu &&
    (config.backend === 'wasm' || (config.backend === 'auto' && wasm.simd128 && wasm.threads));
  // More threads than CPUs only costs memory (a wasm stack each) and start-up time.
  const cpus = availableParallelism();
  const threads = Math.min(config.threads ?? defaultThreadCount(), cpus);
  const capped =
    config.threads !== undefined && config.threads > cpus
      ? ` (--threads ${config.threads} capped to this machine's ${cpus} CPUs)`
      : '';
  const backendText = onGpu
    ? `webgpu (${[onGpu.adapterInfo.vendor, onGpu.adapterInfo.device || onGpu.adapterInfo.description].filter(Boolean).join(' ')}, ${onGpu.backend}${onGpu.isSoftware ? ', software adapter' : ''})`
    : onWasm
      ? `wasm (${threads} threads${capped}, simd128${wasm.relaxedSimd ? ', relaxed simd available' : ''})`
      : 'cpu (@kvasir/model reference kernels)';
  const qDim = c.numHeads * c.headDim;
  const kvDim = c.numKvHeads * c.headDim;
  return {
    modelId,
    weightDigest: digest,
    // Every backend keeps a tensor at its file size: f32 stays f32, f16/bf16 become f16, and
    // GGUF block tensors (Q4_K, Q8_0, ...) stay blocks, on wasm too (before, wasm widened them
    // to f16 and this undercounted a Q4_K_M model 3.5×). The one exception: gate and up of
    // different block types are stored f16.
    weightBytes: reader.totalBytes,
    maxModelLen,
    kvLayout,
    // The CPU keeps one typed array per layer; the wasm backend keeps weights and every
    // layer's cache in one wasm32 memory of at most 4 GiB, so each layer gets its share of
    // what the weights (and 256 MiB of activations) leave.
    maxBindingBytes: onGpu
      ? onGpu.limits.maxStorageBufferBindingSize
      : onWasm
        ? Math.max(
            0,
            Math.floor((WASM32_MAX_BYTES - reader.totalBytes - 256 * 2 ** 20) / c.numLayers),
          )
        : 2 ** 31 - 1,
    backend: backendText,
    device: onGpu ? 'webgpu' : 'cpu',
    activationBytes(maxTokens, maxSeqs) {
      const perToken = 4 * (4 * c.hiddenSize + 2 * qDim + 2 * kvDim + 2 * c.intermediateSize);
      return maxTokens * perToken + maxSeqs * c.vocabSize * 4;
    },
    async allocate(numBlocks) {
      const model = await loadModel(reader, {
        ...(onGpu
          ? { gpu: onGpu }
          : onWasm
            ? { backend: 'wasm' as const, threads }
            : { backend: 'cpu' as const }),
        numBlocks,
        blockSize: config.blockSize,
        kvFormat,
        progress: process.stderr.isTTY === true,
      })
        .catch((error: unknown) => {
          releaseGpu();
          throw asAppError(error, `cannot run model ${modelId}`);
        })
        .finally(closeReader);
      const blockBytes = model.kvBlockBytes;
      if (blockBytes !== kvBlockBytes(model.kvCache) || blockBytes * config.blockSize === 0) {
        throw new KvasirAppError('MODEL_LOAD', 'inconsistent KV block size');
      }
      const runner: ModelRunner = {
        facts: {
          modelId,
          vocabSize: c.vocabSize,
          maxModelLen,
          eosTokenIds: c.eosTokenIds,
          kvLayout,
          blockBytes,
          numBlocks,
          weightBytes: reader.totalBytes,
          weightDigest: digest,
          backend: backendText,
        },
        codec: codecFor(tokenizer),
        // Copy-on-write runs in copyBlocks (also for a plan with no tokens), not again here.
        forward: (plan: BatchPlan) => model.forward({ ...plan, copies: [] }),
        async copyBlocks(copies: readonly BlockCopy[]) {
          if (copies.length === 0) return;
          const data = await model.readBlocks(copies.map((cp) => cp.src));
          await model.writeBlocks(
            copies.map((cp) => cp.dst),
            data,
          );
        },
        async readBlocks(blocks) {
          const all = await model.readBlocks(blocks);
          // One copy per block: a store may keep a block long after the others are gone.
          return blocks.map((_, i) => all.slice(i * blockBytes, (i + 1) * blockBytes));
        },
        async writeBlocks(blocks, data) {
          const all = new Uint8Array(blocks.length * blockBytes);
          blocks.forEach((b, i) => {
            const bytes = data[i];
            if (bytes?.byteLength !== blockBytes) {
              throw new KvasirAppError(
                'SWAP_LOST',
                `block ${b}: ${bytes?.byteLength ?? 0} bytes, expected ${blockBytes}`,
              );
            }
            all.set(bytes, i * blockBytes);
          });
          await model.writeBlocks(blocks, all);
        },
        async dispose() {
          await model.destroy();
          releaseGpu();
        },
      };
      return runner;
    },
    async dispose() {
      await closeReader();
      releaseGpu();
    },
  };
}
