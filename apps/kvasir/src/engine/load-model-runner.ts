import { createHash } from 'node:crypto';
import { availableParallelism } from 'node:os';
import { basename } from 'node:path';
import {
  kvLayoutFor,
  type ModelRunner,
  runnerForModel,
  type TextCodec,
  textCodecFor,
} from '@kvasir/engine';
import type { Gpu } from '@kvasir/gpu';
import type { KvLayout } from '@kvasir/kv-allocator';
import {
  type BackendName,
  type CheckpointReader,
  type DevicePlacement,
  type KvFormatName,
  loadModel,
  type ModelLimits,
  ModelTokenizer,
  modelLimits,
  openCheckpoint,
  probeBackends,
  summarizeWeights,
  TokenizerThread,
  withContextLength,
} from '@kvasir/model';
import type { EngineConfig } from '../config.js';
import { KvasirAppError } from '../errors.js';
import { asAppError, chooseBackend, openPlacementGpus, placeDevices } from './device-choice.js';
import { type KvGroupsChoice, kvGroupsFor } from './kv-groups.js';

/** A model whose weights are loaded, before its KV cache is allocated. */
export interface LoadedModel {
  readonly modelId: string;
  readonly weightDigest: string;
  readonly weightBytes: number;
  readonly maxModelLen: number;
  readonly kvLayout: KvLayout;
  /** Largest storage binding one layer's cache may use (the model's report, on every device). */
  readonly maxBindingBytes: number;
  /** Backend and adapter, in words. */
  readonly backend: string;
  /** Where weights and KV cache live: a WebGPU device, or host memory (the CPU backend). */
  readonly device: 'webgpu' | 'cpu';
  /** The devices it runs on in layer order: one, or several when split by layer. */
  readonly devices: readonly PlacedDevice[];
  /** Scratch memory one step needs at this batch size. */
  activationBytes(maxTokens: number, maxSeqs: number): number;
  /** Whether sliding-window layers hold only their window (KV cache groups), or why not. */
  readonly kvGroups: KvGroupsChoice;
  /** Allocates the paged KV cache and returns the runner the engine drives. */
  allocate(numBlocks: number): Promise<ModelRunner>;
  /** Releases the weights and the device when no runner was allocated. */
  dispose(): Promise<void>;
}

/** One device of a model, for banners and `kvasir info`. */
export interface PlacedDevice {
  /** The backend and device in words. */
  readonly description: string;
  readonly firstLayer: number;
  readonly numLayers: number;
  /** Bytes of the weights it holds. */
  readonly weightBytes: number;
  /** Whether its memory is the host's (cpu, wasm) or a GPU's. */
  readonly hostMemory: boolean;
  /**
   * Its own bounded memory (a WebAssembly memory), which holds its weights, its layers' cache
   * and {@link reservedBytes}; `null` when a memory plan brings the figure (WebGPU, cpu).
   */
  readonly memoryBytes: number | null;
  /** Bytes of {@link memoryBytes} kept for activations. */
  readonly reservedBytes: number;
  /** Most bytes one of its layers' cache may take (one buffer or array per layer). */
  readonly maxLayerKvBytes: number;
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

/** The engine's text side over a @kvasir/model tokenizer, long texts tokenized on a worker thread. */
export function codecFor(tokenizer: ModelTokenizer): TextCodec {
  const thread = new TokenizerThread(tokenizer);
  return textCodecFor(tokenizer, {
    encode: (text, addSpecialTokens) => thread.encode(text, { addSpecialTokens }),
    close: () => thread.close(),
  });
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

/**
 * Loads a checkpoint (HF directory or `.gguf`) for @kvasir/model's forward pass on the
 * backend the model chooses for `--backend` (for `auto`: a hardware GPU when there is one, else
 * the wasm backend, which is faster than a software adapter, else the CPU reference), planned
 * with the limits the model reports for it.
 * @throws KvasirAppError `MODEL_LOAD` when the checkpoint or backend cannot be used;
 *   `INVALID_CONFIG` for a KV dtype the model cannot store.
 */
export async function loadModelRunner(path: string, config: EngineConfig): Promise<LoadedModel> {
  if (config.devices !== undefined && config.gpuLayers !== undefined) {
    throw new KvasirAppError(
      'INVALID_CONFIG',
      `--devices and --gpu-layers both place the layers: give one (--gpu-layers ${config.gpuLayers} is --devices webgpu:layers=0-${config.gpuLayers - 1},wasm)`,
    );
  }
  const placed = config.devices !== undefined || config.gpuLayers !== undefined;
  const chosen = placed
    ? {
        backend: 'wasm' as BackendName,
        gpu: undefined,
        probe: await probeBackends({ webgpu: null }),
      }
    : await chooseBackend(config.backend);
  let backend = chosen.backend;
  let gpu = chosen.gpu;
  // The WebGPU devices of a placement, one per `webgpu` entry.
  let gpus: Gpu[] = [];
  const releaseGpu = () => {
    gpu?.destroy();
    gpu = undefined;
    for (const g of gpus) g.destroy();
    gpus = [];
  };
  const kvFormat = KV_FORMATS[config.kvDtype];
  let reader: CheckpointReader;
  let tokenizer: ModelTokenizer;
  let digest: string;
  try {
    // LongRoPE (Phi-3.5, Phi-4-mini) takes its factors by the context, as llama.cpp by `-c`.
    reader = await openCheckpoint(path, {
      configOverride: (c) => withContextLength(c, config.maxModelLen),
    });
    try {
      tokenizer = await ModelTokenizer.load(path, reader.config.eosTokenIds);
      digest = await weightDigest(reader);
      // Quantized at load, the same file computes other KV: offload namespaces must differ.
      if (config.weightQuant === 'int8') digest += '+int8-g32';
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
  if (config.weightQuant === 'int8') {
    const quantized = summarizeWeights(reader)
      .types.map((t) => t.dtype)
      .filter((d) => d !== 'F32' && d !== 'F16' && d !== 'BF16');
    if (quantized.length > 0) {
      releaseGpu();
      await closeReader();
      throw new KvasirAppError(
        'INVALID_CONFIG',
        `--weight-quant int8 is for F16, BF16 and F32 files; this model's matrices are already quantized (${quantized.join(', ')}): leave it at none`,
      );
    }
  }
  let kvLayout: KvLayout;
  try {
    kvLayout = kvLayoutFor(c, kvFormat, config.blockSize);
  } catch (error) {
    releaseGpu();
    await closeReader();
    throw error;
  }
  // The kernels attend over the whole context, except on the layers a config lists in
  // `slidingWindowLayers` (Gemma 3), whose window the model applies. Another sliding-window model
  // (Mistral, Qwen2 with use_sliding_window) attends over its last `slidingWindow` tokens only,
  // which is the same thing while the context fits the window: the window bounds the context
  // instead of the model silently computing something else past it.
  const maxModelLen = Math.min(
    config.maxModelLen ?? c.maxPositionEmbeddings,
    c.maxPositionEmbeddings,
    c.slidingWindowLayers === undefined
      ? (c.slidingWindow ?? Number.POSITIVE_INFINITY)
      : Number.POSITIVE_INFINITY,
  );
  const modelId = basename(path).replace(/\.gguf$/i, '');
  // More threads than CPUs only costs memory (a wasm stack each) and start-up time.
  const cpus = availableParallelism();
  const threads = config.threads === undefined ? undefined : Math.min(config.threads, cpus);
  let placement: DevicePlacement[] | undefined;
  try {
    placement = await placeDevices(config, reader, threads, kvLayout, maxModelLen, backend);
    if (placement !== undefined) {
      gpus = await openPlacementGpus(placement);
      let g = 0;
      placement = placement.map((d) => (d.backend === 'webgpu' ? { ...d, gpu: gpus[g++] } : d));
      backend = placement[0]?.backend ?? backend;
    }
  } catch (error) {
    releaseGpu();
    await closeReader();
    throw error;
  }
  const usesWebGpu = placement
    ? placement.some((d) => d.backend === 'webgpu')
    : backend === 'webgpu';
  const swa = kvGroupsFor(config, c, { webgpu: usesWebGpu, placed: placement !== undefined });
  // With KV groups a block is one page of `layersPerGroup` layers: the memory plan counts those.
  if (swa.groups) kvLayout = kvLayoutFor(c, kvFormat, config.blockSize, swa.groups);
  if (usesWebGpu && config.blockSize < 8) {
    releaseGpu();
    await closeReader();
    throw new KvasirAppError(
      'INVALID_CONFIG',
      `--block-size: ${config.blockSize} runs on the cpu and wasm backends only; WebGPU's kernels take 8, 16 or 32`,
    );
  }
  let limits: ModelLimits;
  try {
    limits = await modelLimits(reader, {
      backend,
      gpu,
      threads,
      probe: chosen.probe,
      ...(placement ? { devices: placement } : {}),
      ...(config.wasmMemoryBytes === undefined ? {} : { wasmMemoryBytes: config.wasmMemoryBytes }),
    });
  } catch (error) {
    releaseGpu();
    await closeReader();
    throw asAppError(error, `cannot run model ${modelId}`);
  }
  const capped = (text: string) =>
    config.threads !== undefined && config.threads > cpus
      ? text.replace(
          `${threads} threads`,
          `${threads} threads (--threads ${config.threads} capped to this machine's ${cpus} CPUs)`,
        )
      : text;
  const devices: PlacedDevice[] = limits.devices.map((d) => ({
    description: capped(d.description),
    firstLayer: d.firstLayer,
    numLayers: d.numLayers,
    weightBytes: d.weightBytes,
    hostMemory: d.hostMemory,
    memoryBytes: d.memoryBytes,
    reservedBytes: d.reservedBytes,
    maxLayerKvBytes: Math.min(d.maxLayerKvBytes, Math.floor(d.maxKvBytes / d.numLayers)),
  }));
  const backendText =
    devices.length === 1
      ? (devices[0] as PlacedDevice).description
      : devices
          .map((d) => `${d.description} layers ${d.firstLayer}-${d.firstLayer + d.numLayers - 1}`)
          .join(' + ');
  const qDim = c.numHeads * c.headDim;
  const kvDim = c.numKvHeads * c.headDim;
  return {
    modelId,
    weightDigest: digest,
    // Every backend keeps a tensor at its file size: f32 stays f32, f16/bf16 become f16, and
    // GGUF block tensors (Q4_K, Q8_0, ...) stay blocks, on wasm too. The one exception: gate
    // and up of different block types are stored f16. Split by layer, each device's share is
    // in `devices`, which the memory plan checks against each device's memory.
    weightBytes: reader.totalBytes,
    maxModelLen,
    kvLayout,
    // One block id is the same logical block on every device, so the tightest device bounds all.
    // With KV groups (one device) the cache is `layersPerGroup` buffers, not one per layer.
    maxBindingBytes: Math.min(
      ...limits.devices.map((d) =>
        Math.min(
          d.maxLayerKvBytes,
          Math.floor(d.maxKvBytes / (swa.groups?.layersPerGroup ?? d.numLayers)),
        ),
      ),
    ),
    kvGroups: swa,
    backend: backendText,
    device: limits.devices.every((d) => d.hostMemory) ? 'cpu' : 'webgpu',
    devices,
    activationBytes(maxTokens, maxSeqs) {
      const perToken = 4 * (4 * c.hiddenSize + 2 * qDim + 2 * kvDim + 2 * c.intermediateSize);
      return maxTokens * perToken + maxSeqs * c.vocabSize * 4;
    },
    async allocate(numBlocks) {
      const model = await loadModel(reader, {
        backend,
        ...(gpu ? { gpu } : {}),
        ...(placement ? { devices: placement } : {}),
        ...(threads === undefined ? {} : { threads }),
        numBlocks,
        blockSize: config.blockSize,
        kvFormat,
        ...(swa.groups ? { kvGroups: swa.groups } : {}),
        ...(config.weightQuant === 'int8' ? { weightQuant: 'int8' as const } : {}),
        progress: process.stderr.isTTY === true,
      })
        .catch((error: unknown) => {
          releaseGpu();
          throw asAppError(error, `cannot run model ${modelId}`);
        })
        .finally(closeReader);
      return runnerForModel(
        model,
        {
          modelId,
          vocabSize: c.vocabSize,
          maxModelLen,
          eosTokenIds: c.eosTokenIds,
          kvLayout,
          weightBytes: reader.totalBytes,
          weightDigest: digest,
          backend: backendText,
        },
        codecFor(tokenizer),
        releaseGpu,
      );
    },
    async dispose() {
      await closeReader();
      releaseGpu();
    },
  };
}
