import { loadAndPlan } from '../bootstrap.js';
import type { EngineConfig } from '../config.js';
import { DEFAULT_MODEL_NAME, describeDefaultModel, RANDOM_MODEL_NAME } from '../default-model.js';
import { formatBytes, type MemorySource } from '../memory-plan.js';

const MEMORY_SOURCES: Readonly<Record<MemorySource, string>> = {
  configured: '--gpu-memory-bytes',
  'webgpu-default': 'WebGPU default; set --gpu-memory-bytes to the GPU memory',
  'host-available': 'host memory available',
};

/** `kvasir info`: adapter, model and memory plan, without serving. */
export async function infoCommand(config: EngineConfig, json: boolean): Promise<void> {
  const { model, plan, path, isDefault, isRandom } = await loadAndPlan(config);
  try {
    const layout = model.kvLayout;
    const report = {
      backend: model.backend,
      model: {
        path,
        embedded_default: isDefault,
        random_weights: isRandom,
        id: isDefault ? DEFAULT_MODEL_NAME : isRandom ? RANDOM_MODEL_NAME : model.modelId,
        layers: layout.numLayers,
        kv_heads: layout.numKvHeads,
        head_dim: layout.headDim,
        max_model_len: model.maxModelLen,
        weight_bytes: plan.weightBytes,
      },
      kv_cache: {
        dtype: config.kvDtype,
        block_size: layout.blockSize,
        bytes_per_token: plan.kvBytesPerToken,
        bytes_per_block: plan.kvBytesPerBlock,
      },
      memory_plan: {
        device_bytes: plan.deviceBytes,
        memory_source: plan.memorySource,
        fraction: config.gpuMemoryFraction,
        budget_bytes: plan.budgetBytes,
        weight_bytes: plan.weightBytes,
        activation_bytes: plan.activationBytes,
        kv_cache_bytes: plan.kvCacheBytes,
        num_blocks: plan.numBlocks,
        num_tokens: plan.numTokens,
        limited_by: plan.limitedBy,
        max_concurrent_full_contexts: Math.floor(plan.numTokens / model.maxModelLen),
      },
    };
    if (json) {
      process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
      return;
    }
    const lines = [
      `backend          ${report.backend}`,
      `model            ${report.model.id}${isRandom ? '  (random weights: output is noise)' : ''}`,
      `                 ${path}`,
      ...(isDefault ? describeDefaultModel().map((line) => `                 ${line}`) : []),
      `shape            ${layout.numLayers} layers, ${layout.numKvHeads} KV heads × ${layout.headDim}, context ${model.maxModelLen}`,
      `weights          ${formatBytes(plan.weightBytes)}`,
      `KV per token     ${formatBytes(plan.kvBytesPerToken)} (${config.kvDtype}); per block of ${layout.blockSize}: ${formatBytes(plan.kvBytesPerBlock)}`,
      `memory budget    ${formatBytes(plan.budgetBytes)} = ${config.gpuMemoryFraction} × ${formatBytes(plan.deviceBytes)} (${MEMORY_SOURCES[plan.memorySource]})`,
      `activations      ${formatBytes(plan.activationBytes)} (${config.maxNumBatchedTokens} tokens/step, ${config.maxNumSeqs} seqs)`,
      `KV cache         ${plan.numBlocks} blocks = ${plan.numTokens} tokens = ${formatBytes(plan.kvCacheBytes)} (limited by ${plan.limitedBy})`,
      `                 ${report.memory_plan.max_concurrent_full_contexts} sequences at the full ${model.maxModelLen}-token context`,
    ];
    process.stdout.write(`${lines.join('\n')}\n`);
  } finally {
    await model.dispose();
  }
}
