import { basename } from 'node:path';
import { type ModelConfig, type RopeScaling, validateModelConfig } from '../../config.js';
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

/** GGUF architectures read here: llama (Llama, Mistral, SmolLM, TinyLlama) and qwen2. */
const GGUF_ARCHS = ['llama', 'qwen2'] as const;

/**
 * Builds a {@link ModelConfig} from GGUF metadata (the `<arch>.*` keys and tokenizer ids) and
 * the tensor list (tied embeddings when `output.weight` is absent; vocabulary size from
 * `token_embd`; RoPE factors from `rope_freqs`, passed in when present).
 *
 * @throws {@link ModelError} `UNSUPPORTED_ARCHITECTURE` for other architectures or partial
 *   RoPE; `INVALID_CONFIG` for missing keys.
 */
export function configFromGguf(
  md: Map<string, unknown>,
  tensors: readonly GgufTensorEntry[],
  file: string,
  ropeFreqFactors?: Float32Array,
): ModelConfig {
  const arch = md.get('general.architecture');
  if (typeof arch !== 'string' || !(GGUF_ARCHS as readonly string[]).includes(arch)) {
    throw new ModelError(
      'UNSUPPORTED_ARCHITECTURE',
      `${basename(file)}: GGUF architecture ${JSON.stringify(arch)} is not supported (supported: ${GGUF_ARCHS.join(', ')})`,
      { details: { file, architecture: arch } },
    );
  }
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
    throw new ModelError(
      'UNSUPPORTED_ARCHITECTURE',
      `${basename(file)}: RoPE scaling ${JSON.stringify(st)} is not supported`,
      {
        details: { file },
      },
    );
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
    architecture: arch === 'qwen2' ? 'qwen2' : 'llama',
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
    slidingWindow: null,
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
