import { basename } from 'node:path';
import { createGpu, type Gpu } from '@kvasir/gpu';
import { loadModel } from '@kvasir/model';
import type { BatchPlan } from '@kvasir/scheduler';
import type { EngineConfig } from './config.js';
import { codecFor, openModelFiles } from './cpu-runner.js';
import { KvasirAppError } from './errors.js';
import type { LoadedModel } from './model-runner.js';
import type { ModelRunner } from './runner.js';

/** Opens a WebGPU device through @kvasir/gpu (hardware first, then the software adapter). */
export async function openGpu(): Promise<Gpu> {
  try {
    return await createGpu({ label: 'kvasir' });
  } catch (error) {
    throw new KvasirAppError('MODEL_LOAD', `no WebGPU device: ${(error as Error).message}`, {
      cause: error,
    });
  }
}

/**
 * Loads a checkpoint onto WebGPU through @kvasir/model's batched forward pass, on a device the
 * app owns (so its limits inform the memory plan).
 * @throws KvasirAppError `INVALID_CONFIG` for a KV dtype the model's kernels do not store;
 *   `MODEL_LOAD` for unreadable checkpoints.
 */
export async function loadGpuModel(
  path: string,
  config: EngineConfig,
  gpu: Gpu,
): Promise<LoadedModel> {
  if (config.kvDtype !== 'f32' && config.kvDtype !== 'f16') {
    throw new KvasirAppError(
      'INVALID_CONFIG',
      `the WebGPU forward pass of @kvasir/model stores the KV cache in f32 or f16, not ${config.kvDtype}`,
    );
  }
  const kvFormat = config.kvDtype;
  let files: Awaited<ReturnType<typeof openModelFiles>>;
  try {
    files = await openModelFiles(path);
  } catch (error) {
    gpu.destroy();
    throw new KvasirAppError(
      'MODEL_LOAD',
      `cannot load model ${path}: ${(error as Error).message}`,
      {
        cause: error,
      },
    );
  }
  const { reader, tokenizer } = files;
  const c = reader.config;
  const maxModelLen = Math.min(
    config.maxModelLen ?? c.maxPositionEmbeddings,
    c.maxPositionEmbeddings,
  );
  const modelId = basename(path).replace(/\.gguf$/i, '');
  const adapter = gpu.adapterInfo;
  const backendText = `webgpu (${[adapter.vendor, adapter.device || adapter.description].filter(Boolean).join(' ')}, ${gpu.backend}${gpu.isSoftware ? ', software adapter' : ''})`;
  const bytesPerElement = kvFormat === 'f32' ? 4 : 2;
  const qDim = c.numHeads * c.headDim;
  const kvDim = c.numKvHeads * c.headDim;
  let closed = false;
  const closeReader = async () => {
    if (!closed) await reader.close();
    closed = true;
  };
  return {
    modelId,
    weightDigest: `${reader.format}:${reader.totalBytes}:${c.hiddenSize}x${c.numLayers}:${modelId}`,
    // f32 weights stay f32 on the device, other dtypes become f16: the file size bounds it.
    weightBytes: reader.totalBytes,
    maxModelLen,
    kvLayout: {
      numLayers: c.numLayers,
      numKvHeads: c.numKvHeads,
      headDim: c.headDim,
      blockSize: config.blockSize,
      bytesPerElement,
    },
    maxBindingBytes: gpu.limits.maxStorageBufferBindingSize,
    backend: backendText,
    canMoveBlocks: false,
    activationBytes(maxTokens, maxSeqs) {
      const perToken = 4 * (4 * c.hiddenSize + 2 * qDim + 2 * kvDim + 2 * c.intermediateSize);
      return maxTokens * perToken + maxSeqs * c.vocabSize * 4;
    },
    async allocate(numBlocks) {
      const model = await loadModel(reader, {
        gpu,
        numBlocks,
        blockSize: config.blockSize,
        kvFormat,
        progress: process.stderr.isTTY === true,
      }).finally(closeReader);
      const kv = model.kvCache;
      const runner: ModelRunner = {
        facts: {
          modelId,
          vocabSize: c.vocabSize,
          maxModelLen,
          eosTokenIds: c.eosTokenIds,
          kvLayout: {
            numLayers: c.numLayers,
            numKvHeads: c.numKvHeads,
            headDim: c.headDim,
            blockSize: config.blockSize,
            bytesPerElement,
          },
          blockBytes: kv.blockWords * 4 * kv.numLayers,
          numBlocks,
          weightBytes: reader.totalBytes,
          weightDigest: `${reader.format}:${reader.totalBytes}`,
          backend: backendText,
          canMoveBlocks: false,
        },
        codec: codecFor(tokenizer),
        // The model runs the plan's copy-on-write copies itself, before the layers.
        forward: (plan: BatchPlan) => model.forward(plan),
        async copyBlocks() {},
        async readBlocks() {
          throw new KvasirAppError(
            'INVALID_CONFIG',
            'the WebGPU model does not expose KV block read-back (swap)',
          );
        },
        async writeBlocks() {
          throw new KvasirAppError(
            'INVALID_CONFIG',
            'the WebGPU model does not expose KV block upload (swap)',
          );
        },
        async dispose() {
          await model.destroy();
          gpu.destroy();
        },
      };
      return runner;
    },
    async dispose() {
      await closeReader();
      gpu.destroy();
    },
  };
}
