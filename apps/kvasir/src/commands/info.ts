import { deviceBudgetText, formatBytes, type MemorySource } from '@kvasir/engine';
import { openCheckpoint, summarizeWeights, type WeightSummary } from '@kvasir/model';
import type { EngineConfig } from '../config.js';
import { DEFAULT_MODEL_NAME, describeDefaultModel, RANDOM_MODEL_NAME } from '../default-model.js';
import { loadAndPlan } from '../engine/bootstrap.js';
import { kvGroupsReport } from '../engine/kv-groups.js';

const MEMORY_SOURCES: Readonly<Record<MemorySource, string>> = {
  configured: '--gpu-memory-bytes',
  'webgpu-default': 'WebGPU default; set --gpu-memory-bytes to the GPU memory',
  'host-available': 'host memory available',
};

/** What the checkpoint's header says: its tensors' stored types and its architecture. */
interface CheckpointFacts {
  /** The stored types of the model's tensors (a k-quant GGUF mixes several). */
  readonly weights: WeightSummary;
  /** The model family Kvasir runs it as (`llama`, `mistral`, `qwen2`). */
  readonly architecture: string;
  /** GGUF: `general.architecture` (a Mistral 7B GGUF says `llama`); else null. */
  readonly ggufArchitecture: string | null;
  /** GGUF: `tokenizer.ggml.model` and `.pre` (e.g. `gpt2/qwen2`, `llama`); else null. */
  readonly ggufTokenizer: string | null;
  /**
   * A mixture of experts: experts per layer, per token, and the weight bytes one token runs
   * through (every expert's bytes stay in memory); else null.
   */
  readonly experts: {
    readonly perLayer: number;
    readonly perToken: number;
    readonly activeWeightBytes: number;
  } | null;
}

/** Reads {@link CheckpointFacts} from the header only. */
async function checkpointFacts(path: string): Promise<CheckpointFacts> {
  const reader = await openCheckpoint(path);
  try {
    const str = (key: string) => {
      const v = reader.metadata.get(key);
      return typeof v === 'string' ? v : null;
    };
    const model = str('tokenizer.ggml.model');
    const pre = str('tokenizer.ggml.pre');
    const moe = reader.config.moe;
    let expertBytes = 0;
    for (const [name, t] of reader.tensors) {
      if (name.includes('.mlp.experts.')) expertBytes += t.byteLength;
    }
    const idle = moe ? 1 - moe.numExpertsPerToken / moe.numExperts : 0;
    return {
      weights: summarizeWeights(reader),
      architecture: reader.config.architecture,
      ggufArchitecture: reader.format === 'gguf' ? str('general.architecture') : null,
      ggufTokenizer: model === null ? null : pre === null ? model : `${model}/${pre}`,
      experts: moe
        ? {
            perLayer: moe.numExperts,
            perToken: moe.numExpertsPerToken,
            activeWeightBytes: Math.round(reader.totalBytes - expertBytes * idle),
          }
        : null,
    };
  } finally {
    await reader.close();
  }
}

const count = (n: number) =>
  n >= 1e9
    ? `${(n / 1e9).toFixed(2)}B`
    : n >= 1e6
      ? `${(n / 1e6).toFixed(2)}M`
      : n >= 1e3
        ? `${(n / 1e3).toFixed(1)}K`
        : `${n}`;

/** `kvasir info`: adapter, model, its weight types and memory plan, without serving. */
export async function infoCommand(config: EngineConfig, json: boolean): Promise<void> {
  const { model, plan, path, isDefault, isRandom } = await loadAndPlan(config);
  try {
    const layout = model.kvLayout;
    const facts = await checkpointFacts(path);
    const weights = facts.weights;
    const bpw = (bytes: number, params: number) => Number(((8 * bytes) / params).toFixed(4));
    const perLayerBlock = plan.kvBytesPerBlock / layout.numLayers;
    const kvGroups = model.kvGroups.groups;
    const groups = kvGroups && kvGroupsReport(kvGroups, model.maxModelLen, layout.blockSize);
    const numLayers = model.devices.reduce((a, d) => a + d.numLayers, 0);
    // KV bytes per token of a full-context sequence: with groups, what its blocks in every group
    // hold (the plan's per-token figure is one page's layers).
    const kvPerToken = groups
      ? (groups.reduce((a, g) => a + g.blocks_per_full_context, 0) * plan.kvBytesPerBlock) /
        model.maxModelLen
      : plan.kvBytesPerToken;
    const report = {
      backend: model.backend,
      // Where each layer runs: one device, or several when the model is split by layer.
      devices: model.devices.map((d, i) => {
        const budget = plan.devices?.[i];
        return {
          description: d.description,
          first_layer: d.firstLayer,
          num_layers: d.numLayers,
          weight_bytes: d.weightBytes,
          kv_blocks: plan.numBlocks,
          kv_cache_bytes: kvGroups
            ? plan.kvCacheBytes
            : plan.numBlocks * perLayerBlock * d.numLayers,
          // Split by layer, each device's own memory plan (one device: memory_plan below).
          ...(budget === undefined
            ? {}
            : {
                memory_bytes: budget.memoryBytes,
                memory_source: budget.memorySource,
                budget_bytes: budget.budgetBytes,
                reserved_bytes: budget.reservedBytes,
                max_blocks: budget.maxBlocks,
              }),
        };
      }),
      model: {
        path,
        embedded_default: isDefault,
        random_weights: isRandom,
        id: isDefault ? DEFAULT_MODEL_NAME : isRandom ? RANDOM_MODEL_NAME : model.modelId,
        architecture: facts.architecture,
        gguf_architecture: facts.ggufArchitecture,
        gguf_tokenizer: facts.ggufTokenizer,
        layers: layout.numLayers,
        kv_heads: layout.numKvHeads,
        head_dim: layout.headDim,
        max_model_len: model.maxModelLen,
        weight_bytes: model.weightBytes,
        experts:
          facts.experts === null
            ? null
            : {
                per_layer: facts.experts.perLayer,
                per_token: facts.experts.perToken,
                active_weight_bytes_per_token: facts.experts.activeWeightBytes,
              },
      },
      weights: {
        types: weights.types.map((t) => ({
          dtype: t.dtype,
          tensors: t.tensors,
          parameters: t.parameters,
          bytes: t.bytes,
          bits_per_weight: bpw(t.bytes, t.parameters),
        })),
        parameters: weights.parameters,
        bytes: weights.bytes,
        bits_per_weight: Number(weights.bitsPerWeight.toFixed(4)),
        /** What the backend multiplies: the stored types, or int8 made at load. */
        at_load: config.weightQuant === 'int8' ? 'int8' : 'as-stored',
      },
      memory_needed: {
        weight_bytes: weights.bytes,
        kv_bytes_per_token: kvPerToken,
        full_context_bytes: weights.bytes + kvPerToken * model.maxModelLen,
      },
      kv_cache: {
        dtype: config.kvDtype,
        block_size: layout.blockSize,
        bytes_per_token: kvPerToken,
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
        max_concurrent_full_contexts: groups
          ? Math.floor(plan.numBlocks / groups.reduce((a, g) => a + g.blocks_per_full_context, 0))
          : Math.floor(plan.numTokens / model.maxModelLen),
      },
      // Sliding-window layers holding only their window: one block table per group, pages of
      // `layers_per_page` layers.
      ...(groups
        ? { kv_groups: { layers_per_page: layout.numLayers, groups } }
        : model.kvGroups.wholeBecause
          ? { kv_groups: { whole_context_because: model.kvGroups.wholeBecause } }
          : {}),
    };
    const fromFile = [
      ...(facts.ggufArchitecture === null ? [] : [`GGUF ${facts.ggufArchitecture}`]),
      ...(facts.ggufTokenizer === null ? [] : [`tokenizer ${facts.ggufTokenizer}`]),
    ];
    if (json) {
      process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
      return;
    }
    const lines = [
      ...(report.devices.length === 1
        ? [`backend          ${report.backend}`]
        : report.devices.map(
            (d, i) =>
              `${i === 0 ? 'devices          ' : '                 '}${i}: ${d.description}, layers ${d.first_layer}-${d.first_layer + d.num_layers - 1}, weights ${formatBytes(d.weight_bytes)}, KV ${d.kv_blocks} blocks (${formatBytes(d.kv_cache_bytes)})${deviceBudgetText(plan, i)}`,
          )),
      `model            ${report.model.id}${isRandom ? '  (random weights: output is noise)' : ''}`,
      `                 ${path}`,
      ...(isDefault ? describeDefaultModel().map((line) => `                 ${line}`) : []),
      `architecture     ${facts.architecture}${fromFile.length > 0 ? ` (${fromFile.join(', ')})` : ''}`,
      `shape            ${numLayers} layers, ${layout.numKvHeads} KV heads × ${layout.headDim}, context ${model.maxModelLen}`,
      ...(facts.experts === null
        ? []
        : [
            `experts          ${facts.experts.perLayer} per layer, ${facts.experts.perToken} per token: ${formatBytes(facts.experts.activeWeightBytes)} of weights active per token, ${formatBytes(kvPerToken)} of KV per token`,
          ]),
      `weights          ${formatBytes(model.weightBytes)}: ${count(weights.parameters)} parameters, ${report.weights.bits_per_weight} bits per weight`,
      ...report.weights.types.map(
        (t) =>
          `                 ${t.dtype.padEnd(6)} ${String(t.tensors).padStart(4)} tensors ${count(t.parameters).padStart(8)} params ${formatBytes(t.bytes).padStart(10)} (${t.bits_per_weight} bpw)`,
      ),
      `at load          ${config.weightQuant === 'int8' ? 'matrices quantized to int8, 32-column scales (--weight-quant int8)' : 'multiplied as stored (--weight-quant none)'}`,
      `model needs      ${formatBytes(weights.bytes)} of weights + ${formatBytes(kvPerToken)} of KV per token (${formatBytes(report.memory_needed.full_context_bytes)} for one ${model.maxModelLen}-token context)`,
      groups
        ? `KV per token     ${formatBytes(kvPerToken)} (${config.kvDtype}) at the full context with KV groups (${formatBytes((plan.kvBytesPerToken / layout.numLayers) * numLayers)} whole); per block (${layout.numLayers} layer(s) of ${layout.blockSize} tokens): ${formatBytes(plan.kvBytesPerBlock)}`
        : `KV per token     ${formatBytes(plan.kvBytesPerToken)} (${config.kvDtype}); per block of ${layout.blockSize}: ${formatBytes(plan.kvBytesPerBlock)}`,
      `memory budget    ${formatBytes(plan.budgetBytes)} = ${config.gpuMemoryFraction} × ${formatBytes(plan.deviceBytes)} (${MEMORY_SOURCES[plan.memorySource]})`,
      `activations      ${formatBytes(plan.activationBytes)} (${config.maxNumBatchedTokens} tokens/step, ${config.maxNumSeqs} seqs)`,
      `KV cache         ${plan.numBlocks} blocks = ${plan.numTokens} tokens = ${formatBytes(plan.kvCacheBytes)} (limited by ${plan.limitingDevice === undefined ? plan.limitedBy : `device ${plan.limitingDevice}'s memory`})`,
      `                 ${report.memory_plan.max_concurrent_full_contexts} sequences at the full ${model.maxModelLen}-token context`,
      ...(groups
        ? [
            `KV groups        ${groups.length} of ${layout.numLayers} layer(s) per block (sliding-window layers hold only their window; --swa-full keeps the whole context):`,
            ...groups.map(
              (g, i) =>
                `                 ${i}: ${g.layers} layer(s), ${g.window === null ? 'full attention' : `window ${g.window}`}, ${g.blocks_per_full_context} blocks per full-context sequence`,
            ),
          ]
        : model.kvGroups.wholeBecause
          ? [
              `KV groups        one: whole-context KV on the sliding-window layers (${model.kvGroups.wholeBecause})`,
            ]
          : []),
    ];
    process.stdout.write(`${lines.join('\n')}\n`);
  } finally {
    await model.dispose();
  }
}
