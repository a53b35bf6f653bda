import { basename } from 'node:path';
import {
  type Architecture,
  type ModelConfig,
  type RopeScaling,
  validateModelConfig,
} from '../../config.js';
import { ModelError } from '../../errors.js';
import type { GgufTensorEntry } from './header.js';

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
 * GGUF architectures read here: llama (Llama, Mistral 7B, SmolLM, TinyLlama), qwen2 and
 * mistral3 (Ministral 3's text model: llama's block with an optional o_proj bias; MoE,
 * YaRN RoPE and attention temperature scaling are refused below).
 */
export const GGUF_ARCHITECTURES = ['llama', 'qwen2', 'mistral3'] as const;

const ARCHITECTURE_BY_GGUF: Record<(typeof GGUF_ARCHITECTURES)[number], Architecture> = {
  llama: 'llama',
  qwen2: 'qwen2',
  mistral3: 'mistral',
};

/** GGUF architectures whose converter permutes Q/K rows for llama.cpp's interleaved RoPE. */
export const GGUF_PERMUTED_QK: ReadonlySet<string> = new Set(['llama', 'mistral3']);

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
 *
 * @throws {@link ModelError} `UNSUPPORTED_ARCHITECTURE` for other architectures, partial RoPE,
 *   RoPE scalings other than linear (YaRN ...), mixture-of-experts layers or attention
 *   temperature scaling, naming the key; `INVALID_CONFIG` for missing keys.
 */
export function configFromGguf(
  md: Map<string, unknown>,
  tensors: readonly GgufTensorEntry[],
  file: string,
  ropeFreqFactors?: Float32Array,
): ModelConfig {
  const arch = md.get('general.architecture');
  if (typeof arch !== 'string' || !(GGUF_ARCHITECTURES as readonly string[]).includes(arch)) {
    throw new ModelError(
      'UNSUPPORTED_ARCHITECTURE',
      `${basename(file)}: GGUF architecture ${JSON.stringify(arch)} is not supported (supported: ${GGUF_ARCHITECTURES.join(', ')})`,
      { details: { file, architecture: arch } },
    );
  }
  const experts = md.get(`${arch}.expert_count`);
  if (typeof experts === 'number' && experts > 0) {
    throw unsupported(file, `a mixture of experts (${experts} experts)`, `${arch}.expert_count`);
  }
  const temperature = md.get(`${arch}.attention.temperature_scale`);
  if (typeof temperature === 'number' && temperature !== 0) {
    throw unsupported(
      file,
      `attention temperature scaling (${arch}.attention.temperature_scale = ${temperature})`,
      `${arch}.attention.temperature_scale`,
    );
  }
  const window = md.get(`${arch}.attention.sliding_window`);
  const hiddenSize = metaNum(md, `${arch}.embedding_length`, file);
  const numHeads = metaNum(md, `${arch}.attention.head_count`, file);
  const numKvHeads = metaNum(md, `${arch}.attention.head_count_kv`, file, numHeads);
  const headDim = metaNum(
    md,
    `${arch}.attention.key_length`,
    file,
    Math.floor(hiddenSize / numHeads),
  );
  const ropeDim = metaNum(md, `${arch}.rope.dimension_count`, file, headDim);
  if (ropeDim !== headDim) {
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
  let ropeScaling: RopeScaling | null = null;
  const st = md.get(`${arch}.rope.scaling.type`);
  if (st === 'linear') {
    ropeScaling = { type: 'linear', factor: metaNum(md, `${arch}.rope.scaling.factor`, file) };
  } else if (st !== undefined && st !== 'none') {
    throw unsupported(file, `RoPE scaling ${JSON.stringify(st)}`, `${arch}.rope.scaling.type`);
  }
  if (ropeFreqFactors) ropeScaling = { type: 'freq-factors', factors: Array.from(ropeFreqFactors) };
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
  const config: ModelConfig = {
    architecture: ARCHITECTURE_BY_GGUF[arch as (typeof GGUF_ARCHITECTURES)[number]],
    hiddenSize,
    intermediateSize: metaNum(md, `${arch}.feed_forward_length`, file),
    numLayers: metaNum(md, `${arch}.block_count`, file),
    numHeads,
    numKvHeads,
    headDim,
    vocabSize: embd.dims[1] ?? 0,
    rmsNormEps: metaNum(md, `${arch}.attention.layer_norm_rms_epsilon`, file),
    ropeTheta: metaNum(md, `${arch}.rope.freq_base`, file, 10000),
    ropeScaling,
    maxPositionEmbeddings: metaNum(md, `${arch}.context_length`, file),
    tieWordEmbeddings: !byName.has('output.weight'),
    attentionBias: arch === 'qwen2' || byName.has('blk.0.attn_q.bias'),
    attentionOutputBias: byName.has('blk.0.attn_output.bias'),
    slidingWindow: typeof window === 'number' && window > 0 ? window : null,
    bosTokenId: typeof bos === 'number' ? bos : null,
    eosTokenIds: eos,
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
