import { basename } from 'node:path';
import type { KvLayout } from '@kvasir/kv-allocator';
import type { EngineConfig } from './config.js';
import { CpuModelRunner, loadCpuWeights, openModelFiles } from './cpu-runner.js';
import { KvasirAppError } from './errors.js';
import { loadGpuModel, openGpu } from './gpu-runner.js';
import type { ModelRunner } from './runner.js';

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
  /** Whether runners can read and write KV blocks (swap preemption needs it). */
  readonly canMoveBlocks: boolean;
  /** Scratch memory one step needs at this batch size. */
  activationBytes(maxTokens: number, maxSeqs: number): number;
  /** Allocates the paged KV cache and returns the runner the engine drives. */
  allocate(numBlocks: number): Promise<ModelRunner>;
  /** Releases the weights and the device when no runner was allocated. */
  dispose(): Promise<void>;
}

/**
 * Loads a checkpoint (HF directory or `.gguf`) on the configured backend.
 * @throws KvasirAppError `MODEL_LOAD` when the checkpoint or backend cannot be used;
 *   `INVALID_CONFIG` for a KV dtype the backend does not store.
 */
export async function loadModelRunner(path: string, config: EngineConfig): Promise<LoadedModel> {
  // `auto` takes a hardware GPU when there is one; on a software adapter the CPU runner is faster.
  if (config.backend === 'webgpu' || config.backend === 'auto') {
    const gpu = await (config.backend === 'webgpu' ? openGpu() : openGpu().catch(() => undefined));
    if (gpu && (config.backend === 'webgpu' || !gpu.isSoftware)) {
      return loadGpuModel(path, config, gpu);
    }
    gpu?.destroy();
  }
  if (config.kvDtype !== 'f32') {
    throw new KvasirAppError(
      'INVALID_CONFIG',
      `the CPU backend stores the KV cache in f32; --kv-dtype ${config.kvDtype} needs the WebGPU backend`,
    );
  }
  let files: Awaited<ReturnType<typeof openModelFiles>>;
  try {
    files = await openModelFiles(path);
  } catch (error) {
    throw new KvasirAppError(
      'MODEL_LOAD',
      `cannot load model ${path}: ${(error as Error).message}`,
      {
        cause: error,
      },
    );
  }
  const { reader, tokenizer } = files;
  const weights = await loadCpuWeights(reader).finally(() => reader.close());
  const c = weights.config;
  const maxModelLen = Math.min(
    config.maxModelLen ?? c.maxPositionEmbeddings,
    c.maxPositionEmbeddings,
  );
  const modelId = basename(path).replace(/\.gguf$/i, '');
  const qDim = c.numHeads * c.headDim;
  const kvDim = c.numKvHeads * c.headDim;
  return {
    modelId,
    weightDigest: `sha256:${weights.digest}`,
    weightBytes: weights.bytes,
    maxModelLen,
    kvLayout: {
      numLayers: c.numLayers,
      numKvHeads: c.numKvHeads,
      headDim: c.headDim,
      blockSize: config.blockSize,
      bytesPerElement: 4,
    },
    // One JS typed array per layer.
    maxBindingBytes: 2 ** 31 - 1,
    backend: 'cpu (plain TypeScript, f32)',
    canMoveBlocks: true,
    activationBytes(maxTokens, maxSeqs) {
      const perToken = 4 * (4 * c.hiddenSize + 2 * qDim + 2 * kvDim + 2 * c.intermediateSize);
      return maxTokens * perToken + maxSeqs * c.vocabSize * 4;
    },
    async allocate(numBlocks) {
      return new CpuModelRunner(
        weights,
        tokenizer,
        numBlocks,
        config.blockSize,
        modelId,
        maxModelLen,
      );
    },
    async dispose() {},
  };
}
