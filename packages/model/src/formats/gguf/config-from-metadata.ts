import {
  type Architecture,
  everyNthNoRope,
  MODEL_CONFIG_LIMITS,
  type ModelConfig,
  type MoeConfig,
  type RopeScaling,
  validateModelConfig,
} from '../../config.js';
import { ModelError } from '../../errors.js';
import { gemma3FromGguf, slidingPatternLayers } from '../../families/gemma3.js';
import {
  GPT_OSS_SLIDING_PATTERN,
  gptOssDefaults,
  gptOssLayersFromGguf,
  gptOssMoe,
} from '../../families/gpt-oss.js';
import { phi3RopeFromGguf } from '../../families/phi3.js';
import { basename } from '../base-name.js';
import type { GgufTensorEntry } from './header.js';
import { yarnAttentionFactor, yarnFreqDivisors } from './yarn.js';

function metaNum(md: Map<string, unknown>, key: string, file: string, fallback?: number): number {
  const v = md.get(key);
  if (v === undefined) {
    if (fallback !== undefined) return fallback;
    throw new ModelError('INVALID_CONFIG', `${basename(file)}: GGUF metadata "${key}" is missing`, {
      details: { file, key },
    });
  }
  if (typeof v !== 'number' || !Number.isFinite(v)) {
    throw new ModelError(
      'INVALID_CONFIG',
      `${basename(file)}: GGUF metadata "${key}" is not a number`,
      {
        details: { file, key },
      },
    );
  }
  return v;
}

/**
 * A size key of the metadata: a positive integer up to the limit of the config field it sets,
 * checked before anything is sized by it (the RoPE factors by the head dim, the expected
 * tensors by the layer count).
 */
function metaSize(
  md: Map<string, unknown>,
  key: string,
  file: string,
  field: keyof typeof MODEL_CONFIG_LIMITS,
  fallback?: number,
): number {
  const v = metaNum(md, key, file, fallback);
  const limit = MODEL_CONFIG_LIMITS[field];
  if (!Number.isInteger(v) || v <= 0 || v > limit) {
    throw new ModelError(
      'INVALID_CONFIG',
      `${basename(file)}: GGUF metadata "${key}" is ${v}; ${field} must be a positive integer up to ${limit}`,
      { details: { file, key, value: v, limit } },
    );
  }
  return v;
}

/**
 * GGUF architectures read here: llama (Llama, Mistral 7B, SmolLM, TinyLlama), qwen2,
 * mistral3 (Ministral 3's text model: llama's block with YaRN RoPE and Llama 4-style attention
 * temperature scaling; its MoE variant is refused below), qwen3 (qwen2's block without QKV
 * bias, with Q/K RMSNorm per head before RoPE), smollm3 (llama's block with no RoPE on
 * every fourth layer, which llama.cpp fixes at 4: the file has no key for it), gemma3 (Gemma
 * 3's text model: scaled embeddings, GELU-tanh, Q/K and sandwich norms, its norm weights stored
 * as `1 + w`, five sliding-window layers to one global layer; see `gemma3FromGguf`) and qwen3moe
 * (qwen3's attention, a mixture of experts in every layer: softmax router, top
 * `expert_used_count` of `expert_count`, weights always renormalized, as llama.cpp runs it).
 */
export const GGUF_ARCHITECTURES = [
  'llama',
  'qwen2',
  'mistral3',
  'qwen3',
  'smollm3',
  'gemma3',
  'qwen3moe',
  'gpt-oss',
  'phi3',
] as const;

const ARCHITECTURE_BY_GGUF: Record<(typeof GGUF_ARCHITECTURES)[number], Architecture> = {
  llama: 'llama',
  qwen2: 'qwen2',
  mistral3: 'mistral',
  qwen3: 'qwen3',
  smollm3: 'smollm3',
  gemma3: 'gemma3',
  qwen3moe: 'qwen3moe',
  'gpt-oss': 'gpt-oss',
  phi3: 'phi3',
};

/**
 * Architectures that llama.cpp knows and this package refuses, each with what it lacks: the
 * refusal names the feature instead of only the architecture.
 */
const REFUSED_GGUF: Readonly<Record<string, string>> = {};

/** GGUF architectures whose converter permutes Q/K rows for llama.cpp's interleaved RoPE. */
export const GGUF_PERMUTED_QK: ReadonlySet<string> = new Set(['llama', 'mistral3', 'smollm3']);

/**
 * YaRN's per-pair frequency divisors from `<arch>.rope.scaling.*` (see {@link yarnFreqDivisors}).
 *
 * @throws {@link ModelError} `UNSUPPORTED_ARCHITECTURE` when llama.cpp would scale cos/sin by a
 *   factor other than 1 (plain YaRN without `yarn_log_multiplier`), or for a `yarn_ext_factor`
 *   other than 1.
 */
function yarnFromMetadata(
  md: Map<string, unknown>,
  arch: string,
  file: string,
  headDim: number,
  ropeTheta: number,
  originalContext: number,
): { divisors: number[]; attention: number } {
  const key = (k: string) => `${arch}.rope.scaling.${k}`;
  const factor = metaNum(md, key('factor'), file);
  const ext = metaNum(md, key('yarn_ext_factor'), file, 1);
  if (ext !== 1)
    throw unsupported(file, `YaRN with yarn_ext_factor ${ext}`, key('yarn_ext_factor'));
  const attention = yarnAttentionFactor(
    factor,
    metaNum(md, key('yarn_log_multiplier'), file, 0),
    metaNum(md, key('attn_factor'), file, 1),
  );
  // gpt-oss's cos/sin factor scales q and k alike: q·k by its square, expressed as the
  // attention scale (the cache then holds unscaled keys, which nothing else reads).
  if (Math.abs(attention - 1) > 1e-6 && arch !== 'gpt-oss') {
    throw unsupported(
      file,
      `YaRN with an attention factor of ${attention.toFixed(4)} (cos/sin scaled; only 1 is)`,
      key('yarn_log_multiplier'),
    );
  }
  const divisors = yarnFreqDivisors(headDim, ropeTheta, {
    factor,
    originalContext,
    betaFast: metaNum(md, key('yarn_beta_fast'), file, 32),
    betaSlow: metaNum(md, key('yarn_beta_slow'), file, 1),
  });
  return { divisors, attention };
}

/**
 * The experts of a GGUF mixture of experts. llama.cpp's `qwen3moe` takes an expert's width
 * from `expert_feed_forward_length`, else `feed_forward_length / expert_used_count`, and always
 * renormalizes the chosen experts' weights.
 */
function ggufMoe(
  md: Map<string, unknown>,
  arch: string,
  file: string,
  intermediateSize: number,
): MoeConfig {
  const numExperts = metaNum(md, `${arch}.expert_count`, file);
  const used = metaNum(md, `${arch}.expert_used_count`, file);
  for (const [key, v] of [
    ['expert_count', numExperts],
    ['expert_used_count', used],
  ] as const) {
    if (!Number.isInteger(v) || v <= 0 || v > numExperts) {
      throw new ModelError(
        'INVALID_CONFIG',
        `${basename(file)}: GGUF metadata "${arch}.${key}" is ${v}; it must be a positive integer${key === 'expert_used_count' ? ` up to expert_count (${numExperts})` : ''}`,
        { details: { file, key: `${arch}.${key}`, value: v } },
      );
    }
  }
  return {
    numExperts,
    numExpertsPerToken: used,
    expertIntermediateSize: metaSize(
      md,
      `${arch}.expert_feed_forward_length`,
      file,
      'intermediateSize',
      Math.max(1, Math.floor(intermediateSize / used)),
    ),
    normTopkProb: true,
  };
}

/**
 * gpt-oss's fields from its GGUF metadata, as llama.cpp's `openai-moe` loader reads them: the
 * window (`attention.sliding_window`, required), the sliding layers (a per-layer
 * `attention.sliding_window_pattern` list, or its interleaving, default 2: even layers), the
 * experts (their biases and OpenAI's SwiGLU are fixed), and YaRN's cos/sin factor as the
 * attention scale.
 */
function gptOssFromGguf(
  md: Map<string, unknown>,
  file: string,
  numLayers: number,
  headDim: number,
  intermediateSize: number,
  yarnAttention: number,
): Partial<ModelConfig> {
  const window = metaNum(md, 'gpt-oss.attention.sliding_window', file);
  if (!Number.isInteger(window) || window <= 0) {
    throw new ModelError(
      'INVALID_CONFIG',
      `${basename(file)}: GGUF metadata "gpt-oss.attention.sliding_window" is ${window}; it must be a positive integer`,
      { details: { file, key: 'gpt-oss.attention.sliding_window' } },
    );
  }
  const pattern = md.get('gpt-oss.attention.sliding_window_pattern');
  const every = typeof pattern === 'number' ? pattern : GPT_OSS_SLIDING_PATTERN;
  const sliding =
    gptOssLayersFromGguf(pattern, numLayers) ?? slidingPatternLayers(numLayers, every);
  const moe = ggufMoe(md, 'gpt-oss', file, intermediateSize);
  return {
    ...gptOssDefaults(numLayers),
    slidingWindow: window,
    slidingWindowLayers: sliding,
    moe: gptOssMoe(moe.numExperts, moe.numExpertsPerToken, moe.expertIntermediateSize),
    ...(yarnAttention !== 1
      ? { attentionScale: (yarnAttention * yarnAttention) / Math.sqrt(headDim) }
      : {}),
  };
}

function unsupported(file: string, what: string, key: string): ModelError {
  return new ModelError('UNSUPPORTED_ARCHITECTURE', `${basename(file)}: ${what} is not supported`, {
    details: { file, key },
  });
}

/**
 * Builds a {@link ModelConfig} from GGUF metadata (the `<arch>.*` keys and tokenizer ids) and
 * the tensor list (tied embeddings when `output.weight` is absent; vocabulary size from
 * `token_embd`; RoPE factors from `rope_freqs`, passed in when present).
 *
 * A declared sliding window (`<arch>.attention.sliding_window`, 0 meaning none) is kept in
 * `slidingWindow`, as {@link parseHfConfig} keeps Mistral's: attention here is full, which equals
 * windowed attention while a sequence fits in the window, so a server caps the context there.
 * YaRN RoPE becomes per-pair `freq-factors` (llama.cpp's angles) when its cos/sin factor is 1.
 * Attention temperature scaling (`<arch>.attention.temperature_scale`) multiplies queries by
 * 1 + β·ln(1 + ⌊pos / original context⌋), which is 1 below the original context: the config's
 * `maxPositionEmbeddings` stops there.
 *
 * @throws {@link ModelError} `UNSUPPORTED_ARCHITECTURE` for other architectures, partial RoPE,
 *   RoPE scalings other than linear and YaRN, YaRN that scales cos/sin, and mixture-of-experts
 *   layers, naming the key; `INVALID_CONFIG` for missing keys.
 */
export function configFromGguf(
  md: Map<string, unknown>,
  tensors: readonly GgufTensorEntry[],
  file: string,
  ropeFreqFactors?: Float32Array,
  longRopeTensors?: { readonly long?: Float32Array; readonly short?: Float32Array },
): ModelConfig {
  const arch = md.get('general.architecture');
  if (typeof arch !== 'string' || !(GGUF_ARCHITECTURES as readonly string[]).includes(arch)) {
    const lacks = typeof arch === 'string' ? REFUSED_GGUF[arch] : undefined;
    throw new ModelError(
      'UNSUPPORTED_ARCHITECTURE',
      `${basename(file)}: GGUF architecture ${JSON.stringify(arch)} is not supported${lacks ? ` yet: ${lacks}` : ''} (supported: ${GGUF_ARCHITECTURES.join(', ')})`,
      { details: { file, architecture: arch } },
    );
  }
  const experts = md.get(`${arch}.expert_count`);
  if (arch !== 'qwen3moe' && arch !== 'gpt-oss' && typeof experts === 'number' && experts > 0) {
    throw unsupported(file, `a mixture of experts (${experts} experts)`, `${arch}.expert_count`);
  }
  const window = md.get(`${arch}.attention.sliding_window`);
  const hiddenSize = metaSize(md, `${arch}.embedding_length`, file, 'hiddenSize');
  const numHeads = metaSize(md, `${arch}.attention.head_count`, file, 'numHeads');
  const numKvHeads = metaSize(md, `${arch}.attention.head_count_kv`, file, 'numKvHeads', numHeads);
  const headDim = metaSize(
    md,
    `${arch}.attention.key_length`,
    file,
    'headDim',
    Math.floor(hiddenSize / numHeads),
  );
  const ropeDim = metaNum(md, `${arch}.rope.dimension_count`, file, headDim);
  if (ropeDim !== headDim && arch !== 'phi3') {
    throw new ModelError(
      'UNSUPPORTED_ARCHITECTURE',
      `${basename(file)}: partial RoPE (${ropeDim} of ${headDim} dims) is not supported`,
      {
        details: { file },
      },
    );
  }
  const byName = new Map(tensors.map((t) => [t.name, t]));
  const embd = byName.get('token_embd.weight');
  if (!embd) {
    throw new ModelError(
      'MISSING_TENSOR',
      `${basename(file)}: missing tensor "token_embd.weight"`,
      {
        details: { file, tensor: 'token_embd.weight' },
      },
    );
  }
  const contextLength = metaSize(md, `${arch}.context_length`, file, 'maxPositionEmbeddings');
  const numLayers = metaSize(md, `${arch}.block_count`, file, 'numLayers');
  const ropeTheta = metaNum(md, `${arch}.rope.freq_base`, file, 10000);
  // llama.cpp's n_ctx_orig_yarn: YaRN's original context, and the span of positions over which
  // Llama 4-style attention temperature scaling (1 + β·ln(1 + ⌊pos / span⌋)) stays 1.
  const originalContext = metaNum(
    md,
    `${arch}.rope.scaling.original_context_length`,
    file,
    contextLength,
  );
  let ropeScaling: RopeScaling | null = null;
  let yarn: { divisors: number[]; attention: number } | undefined;
  const st = md.get(`${arch}.rope.scaling.type`);
  if (st === 'linear') {
    ropeScaling = { type: 'linear', factor: metaNum(md, `${arch}.rope.scaling.factor`, file) };
  } else if (st === 'yarn') {
    yarn = yarnFromMetadata(md, arch, file, headDim, ropeTheta, originalContext);
  } else if (st !== undefined && st !== 'none') {
    throw unsupported(file, `RoPE scaling ${JSON.stringify(st)}`, `${arch}.rope.scaling.type`);
  }
  const longRope =
    arch === 'phi3'
      ? phi3RopeFromGguf(
          (key) => md.get(`phi3.${key}`),
          basename(file),
          ropeDim,
          contextLength,
          longRopeTensors,
        )
      : undefined;
  if (longRope?.ropeScaling) ropeScaling = longRope.ropeScaling;
  if (ropeFreqFactors || yarn) {
    // Both divide the same frequencies: llama.cpp divides by rope_freqs, then applies YaRN.
    const factors = Array.from({ length: ropeDim / 2 }, (_, i) => {
      return (ropeFreqFactors?.[i] ?? 1) * (yarn?.divisors[i] ?? 1);
    });
    ropeScaling = { type: 'freq-factors', factors };
  }
  const temperature = md.get(`${arch}.attention.temperature_scale`);
  const temperatureScaled = typeof temperature === 'number' && temperature !== 0;
  const eos: number[] = [];
  for (const k of [
    'tokenizer.ggml.eos_token_id',
    'tokenizer.ggml.eot_token_id',
    'tokenizer.ggml.eom_token_id',
  ]) {
    const v = md.get(k);
    if (typeof v === 'number' && !eos.includes(v)) eos.push(v);
  }
  const bos = md.get('tokenizer.ggml.bos_token_id');
  const intermediateSize = metaSize(md, `${arch}.feed_forward_length`, file, 'intermediateSize');
  const config: ModelConfig = {
    architecture: ARCHITECTURE_BY_GGUF[arch as (typeof GGUF_ARCHITECTURES)[number]],
    hiddenSize,
    intermediateSize,
    numLayers,
    numHeads,
    numKvHeads,
    headDim,
    vocabSize: embd.dims[1] ?? 0,
    rmsNormEps: metaNum(md, `${arch}.attention.layer_norm_rms_epsilon`, file),
    ropeTheta,
    ropeScaling,
    maxPositionEmbeddings: temperatureScaled
      ? Math.min(contextLength, originalContext)
      : contextLength,
    tieWordEmbeddings: !byName.has('output.weight'),
    attentionBias: arch === 'qwen2' || byName.has('blk.0.attn_q.bias'),
    attentionOutputBias: byName.has('blk.0.attn_output.bias'),
    slidingWindow: typeof window === 'number' && window > 0 ? window : null,
    bosTokenId: typeof bos === 'number' ? bos : null,
    eosTokenIds: eos,
    ...(arch === 'qwen3' ? { qkNorm: true } : {}),
    ...(arch === 'smollm3' ? { noRopeLayers: everyNthNoRope(numLayers) } : {}),
    ...(arch === 'gemma3'
      ? gemma3FromGguf((key) => md.get(`gemma3.${key}`), {
          numLayers,
          hiddenSize,
          numHeads,
          headDim,
        })
      : {}),
    ...(arch === 'qwen3moe'
      ? { qkNorm: true, moe: ggufMoe(md, arch, file, intermediateSize) }
      : {}),
    ...(arch === 'gpt-oss'
      ? gptOssFromGguf(md, file, numLayers, headDim, intermediateSize, yarn?.attention ?? 1)
      : {}),
    ...(ropeDim !== headDim ? { rotaryDim: ropeDim } : {}),
    ...(longRope?.ropeAttentionFactor !== undefined
      ? { ropeAttentionFactor: longRope.ropeAttentionFactor }
      : {}),
  };
  try {
    validateModelConfig(config);
  } catch (e) {
    throw new ModelError('INVALID_CONFIG', `${basename(file)}: ${(e as Error).message}`, {
      cause: e,
      details: { file },
    });
  }
  return config;
}
