import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { ropeInvFrequencies } from '@kvasir/attention-kernels';
import { GGML_BLOCK_FORMATS } from '@kvasir/quantizer/ggml';
import { expectedTensors, type ModelConfig, ropeConfig } from '../../config.js';
import { ModelError } from '../../errors.js';
import {
  GEMMA3_LOCAL_ROPE_THETA,
  gemma3GgufAttentionScale,
  normWeightShift,
  slidingPatternLayers,
} from '../../families/gemma3.js';
import { gptOssSlidingLayers } from '../../families/gpt-oss.js';
import type { CheckpointReader } from '../checkpoint-reader.js';
import { isBlockDtype, type TensorDtype } from '../dtype.js';
import { openCheckpoint } from '../open-checkpoint.js';
import { GGUF_PERMUTED_QK } from './config-from-metadata.js';
import { permuteQkRows } from './qk-permute.js';
import { ggufFusedTensor, hfToGgufExpert, hfToGgufFused, hfToGgufName } from './tensor-names.js';
import { ggufTokenizerMetadata } from './tokenizer-metadata.js';
import type { GgufTypedValue } from './value-types.js';
import { type GgufTensorToWrite, writeGguf } from './writer.js';

// llama.cpp's `llama_ftype` of a file whose matrices are all `dtype` (the `_S` preset for a
// k-quant: every matrix in that one type).
const LLAMA_FTYPE: Record<TensorDtype, number> = {
  F32: 0,
  F16: 1,
  Q4_0: 2,
  Q4_1: 3,
  Q8_0: 7,
  Q5_0: 8,
  Q5_1: 9,
  Q2_K: 10,
  Q3_K: 11,
  Q4_K: 14,
  Q5_K: 16,
  Q6_K: 18,
  IQ4_NL: 25,
  BF16: 32,
  // LLAMA_FTYPE_MOSTLY_MXFP4_MOE (gpt-oss: MXFP4 experts, the rest as the file has them).
  MXFP4: 38,
};

function checkBlockRows(dtype: TensorDtype, shape: readonly number[], name: string): void {
  if (isBlockDtype(dtype) && shape[1]! % GGML_BLOCK_FORMATS[dtype].blockSize !== 0) {
    throw new ModelError(
      'INVALID_ARGUMENT',
      `${dtype} needs rows that are multiples of ${GGML_BLOCK_FORMATS[dtype].blockSize}; "${name}" has rows of ${shape[1]}`,
      { details: { tensor: name } },
    );
  }
}

/** Options of {@link convertToGguf}. */
export interface ConvertToGgufOptions {
  /**
   * Type of the 2-D weight matrices (default F32). Norm weights and biases stay F32, as
   * llama.cpp's converter keeps them. A block format (Q8_0, Q4_K, ...: ggml's reference
   * quantizer, no importance matrix) needs row lengths that are whole blocks (32 or 256).
   */
  readonly dtype?: TensorDtype;
  /**
   * Types of single tensors by GGUF name (`blk.0.attn_v.weight`), over `dtype`: the mixes
   * llama-quantize makes (Q4_K_M keeps some matrices in Q6_K), as its `--tensor-type` does.
   */
  readonly tensorDtypes?: Readonly<Record<string, TensorDtype>>;
  /** Skip the tokenizer even when the source directory has one. Default false. */
  readonly withoutTokenizer?: boolean;
  /**
   * More metadata, written over the converter's own keys: `general.name` (default
   * `kvasir-converted`), `general.license`, a description. Values as {@link writeGguf} takes them.
   */
  readonly metadata?: Readonly<Record<string, unknown | GgufTypedValue>>;
}

/**
 * Converts a Hugging Face checkpoint directory (or an open reader) into a GGUF v3 file the way
 * llama.cpp's `convert_hf_to_gguf.py` lays it out: llama (qwen2, qwen3, smollm3, qwen3moe) metadata keys,
 * GGUF tensor names (a mixture of experts' matrices as one 3-D tensor per projection), Q/K rows permuted for interleaved RoPE (llama and smollm3), Llama 3 RoPE scaling as a
 * `rope_freqs` tensor, optional Q8_0 quantization, and the byte-level BPE tokenizer with its
 * chat template. Reading the result with {@link openGgufCheckpoint} gives back the HF tensors
 * (exactly for F32; within the format's rounding otherwise).
 *
 * @throws {@link ModelError} `INVALID_ARGUMENT` for a `dtype` (or `tensorDtypes` entry) it
 *   does not write (a preset such as `Q4_K_M`: llama.cpp's `llama-quantize` chooses its types
 *   per tensor, which `tensorDtypes` can repeat), or a block
 *   format with rows not a multiple of its block;
 *   `UNSUPPORTED_TOKENIZER` for tokenizers GGUF cannot express; reader and `IO` errors.
 */
export async function convertToGguf(
  src: string | CheckpointReader,
  dstPath: string,
  options?: ConvertToGgufOptions,
): Promise<void> {
  const dtype = options?.dtype ?? 'F32';
  // A JavaScript caller (or a command line) may pass any string: refuse it before opening.
  const unknown = [dtype, ...Object.values(options?.tensorDtypes ?? {})].find(
    (t) => !Object.hasOwn(LLAMA_FTYPE, t),
  );
  if (unknown !== undefined) {
    throw new ModelError(
      'INVALID_ARGUMENT',
      `dtype ${JSON.stringify(unknown)} is not a type convertToGguf writes; it writes ${Object.keys(LLAMA_FTYPE).join(', ')} (mixtures such as Q4_K_M come from llama.cpp's llama-quantize of an F16 file)`,
      { details: { dtype: unknown } },
    );
  }
  const reader = typeof src === 'string' ? await openCheckpoint(src) : src;
  try {
    const c = reader.config;
    // Mistral is written as llama, as llama.cpp's converter does.
    const arch = c.architecture === 'mistral' ? 'llama' : c.architecture;
    const md: Record<string, unknown | GgufTypedValue> = {
      'general.architecture': arch,
      'general.name': 'kvasir-converted',
      'general.file_type': LLAMA_FTYPE[dtype],
      [`${arch}.context_length`]: c.maxPositionEmbeddings,
      [`${arch}.embedding_length`]: c.hiddenSize,
      [`${arch}.block_count`]: c.numLayers,
      [`${arch}.feed_forward_length`]: c.intermediateSize,
      [`${arch}.attention.head_count`]: c.numHeads,
      [`${arch}.attention.head_count_kv`]: c.numKvHeads,
      [`${arch}.attention.key_length`]: c.headDim,
      [`${arch}.attention.value_length`]: c.headDim,
      [`${arch}.attention.layer_norm_rms_epsilon`]: { type: 'f32', value: c.rmsNormEps },
      [`${arch}.rope.freq_base`]: { type: 'f32', value: c.ropeTheta },
      [`${arch}.rope.dimension_count`]: c.rotaryDim ?? c.headDim,
      [`${arch}.vocab_size`]: c.vocabSize,
    };
    if (c.moe) {
      md[`${arch}.expert_count`] = c.moe.numExperts;
      md[`${arch}.expert_used_count`] = c.moe.numExpertsPerToken;
      md[`${arch}.expert_feed_forward_length`] = c.moe.expertIntermediateSize;
      if (!c.moe.normTopkProb) {
        throw new ModelError(
          'INVALID_ARGUMENT',
          "a mixture of experts without norm_topk_prob has no GGUF form: llama.cpp's qwen3moe always renormalizes the chosen experts' weights",
        );
      }
    }
    if (c.ropeScaling?.type === 'linear') {
      md[`${arch}.rope.scaling.type`] = 'linear';
      md[`${arch}.rope.scaling.factor`] = { type: 'f32', value: c.ropeScaling.factor };
    }
    if (c.architecture === 'gemma3') Object.assign(md, gemma3Metadata(c));
    if (c.architecture === 'gpt-oss') Object.assign(md, gptOssMetadata(c));
    if (c.ropeAttentionFactor !== undefined || c.ropeScaling?.type === 'longrope') {
      if (c.architecture !== 'phi3') {
        throw new ModelError(
          'INVALID_ARGUMENT',
          `a ${arch} GGUF has no LongRoPE: llama.cpp reads rope_factors_long/short and rope.scaling.attn_factor for phi3 only`,
        );
      }
      md['phi3.rope.scaling.attn_factor'] = { type: 'f32', value: c.ropeAttentionFactor ?? 1 };
    }
    if (c.bosTokenId !== null) md['tokenizer.ggml.bos_token_id'] = c.bosTokenId;
    if (c.eosTokenIds[0] !== undefined) md['tokenizer.ggml.eos_token_id'] = c.eosTokenIds[0];
    if (c.eosTokenIds[1] !== undefined)
      md['tokenizer.ggml.eot_token_id'] = c.eosTokenIds[c.eosTokenIds.length - 1];
    if (!options?.withoutTokenizer && reader.format === 'safetensors') {
      let tj: Record<string, unknown> | undefined;
      try {
        tj = JSON.parse(await readFile(join(reader.path, 'tokenizer.json'), 'utf8'));
      } catch {
        tj = undefined;
      }
      if (tj) {
        let tc: Record<string, unknown> = {};
        try {
          tc = JSON.parse(await readFile(join(reader.path, 'tokenizer_config.json'), 'utf8'));
        } catch {
          // A tokenizer without a config has no bos/eos names or template; ids come from config.json.
        }
        const template = typeof tc.chat_template === 'string' ? tc.chat_template : null;
        Object.assign(md, ggufTokenizerMetadata(tj, tc, template, c.vocabSize));
        if (c.bosTokenId !== null) md['tokenizer.ggml.bos_token_id'] = c.bosTokenId;
        if (c.eosTokenIds[0] !== undefined) md['tokenizer.ggml.eos_token_id'] = c.eosTokenIds[0];
      }
    }

    const tensors: GgufTensorToWrite[] = [];
    if (c.ropeScaling?.type === 'longrope') {
      const s = c.ropeScaling;
      md['phi3.rope.scaling.original_context_length'] = s.originalMaxPositionEmbeddings;
      for (const [name, list] of [
        ['rope_factors_long.weight', s.longFactors],
        ['rope_factors_short.weight', s.shortFactors],
      ] as const) {
        tensors.push({ name, dtype: 'F32', shape: [list.length], data: Float32Array.from(list) });
      }
    }
    if (c.ropeScaling?.type === 'llama3' || c.ropeScaling?.type === 'freq-factors') {
      const scaled = ropeInvFrequencies(ropeConfig(c, 1));
      const plain = ropeInvFrequencies(ropeConfig({ ...c, ropeScaling: null }, 1));
      const factors = new Float32Array(scaled.length);
      for (let i = 0; i < factors.length; i++) factors[i] = plain[i]! / scaled[i]!;
      tensors.push({
        name: 'rope_freqs.weight',
        dtype: 'F32',
        shape: [factors.length],
        data: factors,
      });
    }
    // Gemma's `1 + w` norms: llama.cpp's converter stores the sum.
    const normShift = normWeightShift(reader);
    const written = new Set<string>();
    for (const t of expectedTensors(c)) {
      const expert = hfToGgufExpert(t.name);
      if (expert) {
        // Every expert of a projection in one 3-D tensor, expert-major, as llama.cpp stores them.
        if (written.has(expert.gguf)) continue;
        written.add(expert.gguf);
        const n = c.moe?.numExperts ?? 0;
        const names = Array.from({ length: n }, (_, e) =>
          t.name.replace(/\.experts\.\d+\./, `.experts.${e}.`),
        );
        const tdtype: TensorDtype =
          options?.tensorDtypes?.[expert.gguf] ?? (t.shape.length === 2 ? dtype : 'F32');
        checkBlockRows(tdtype, t.shape, t.name);
        tensors.push({
          name: expert.gguf,
          dtype: tdtype,
          shape: [n, ...t.shape],
          data: async () => {
            const per = t.shape.reduce((a, b) => a * b, 1);
            const all = new Float32Array(n * per);
            for (const [e, name] of names.entries())
              all.set(await reader.readTensorF32(name), e * per);
            return all;
          },
        });
        continue;
      }
      const fused = c.architecture === 'phi3' ? hfToGgufFused(t.name) : undefined;
      if (fused) {
        // Phi-3's fused attn_qkv (Q, K, V) and ffn_up (gate, up), as llama.cpp stores them.
        if (fused.part !== 0) continue;
        const parts = ggufFusedTensor(fused.gguf, c) ?? [];
        const rows = parts.reduce((a, p) => a + p.rows, 0);
        const shape = [rows, t.shape[1] as number];
        const tdtype: TensorDtype = options?.tensorDtypes?.[fused.gguf] ?? dtype;
        checkBlockRows(tdtype, shape, fused.gguf);
        tensors.push({
          name: fused.gguf,
          dtype: tdtype,
          shape,
          data: async () => {
            const all = new Float32Array(rows * (t.shape[1] as number));
            let at = 0;
            for (const p of parts) {
              const v = await reader.readTensorF32(p.name);
              all.set(v, at);
              at += v.length;
            }
            return all;
          },
        });
        continue;
      }
      const gname = hfToGgufName(t.name, c.architecture);
      if (!gname) throw new ModelError('INVALID_ARGUMENT', `no GGUF name for tensor "${t.name}"`);
      const matrix = t.shape.length === 2;
      let tdtype: TensorDtype = options?.tensorDtypes?.[gname] ?? (matrix ? dtype : 'F32');
      checkBlockRows(tdtype, t.shape, t.name);
      if (tdtype === 'BF16' && !matrix) tdtype = 'F32';
      const permute = GGUF_PERMUTED_QK.has(arch) && /\.self_attn\.[qk]_proj\./.test(t.name);
      tensors.push({
        name: gname,
        dtype: tdtype,
        shape: t.shape,
        data: async () => {
          const v = await reader.readTensorF32(t.name);
          if (normShift !== 0 && t.name.endsWith('norm.weight')) {
            for (let i = 0; i < v.length; i++) v[i] = (v[i] as number) + normShift;
          }
          return permute ? permuteQkRows(v, t.shape[0]!, c.headDim) : v;
        },
      });
    }
    Object.assign(md, options?.metadata);
    await writeGguf(dstPath, md, tensors);
  } finally {
    if (typeof src === 'string') await reader.close();
  }
}

/**
 * The `gpt-oss.*` keys llama.cpp's loader needs beyond the Llama ones: the window, and the
 * sliding layers as a per-layer list when they are not its default alternation.
 *
 * @throws {@link ModelError} `INVALID_ARGUMENT` for an attention scale GGUF cannot hold (only
 *   `1 / sqrt(headDim)`; YaRN's factor comes from `rope.scaling.*` keys this converter does not
 *   write).
 */
function gptOssMetadata(c: ModelConfig): Record<string, unknown | GgufTypedValue> {
  if (c.attentionScale !== undefined && c.attentionScale !== 1 / Math.sqrt(c.headDim)) {
    throw new ModelError(
      'INVALID_ARGUMENT',
      `a gpt-oss GGUF cannot hold attention scale ${c.attentionScale}: llama.cpp uses 1/sqrt(head size) and YaRN's factor`,
      { details: { attentionScale: c.attentionScale } },
    );
  }
  const md: Record<string, unknown | GgufTypedValue> = {
    'gpt-oss.attention.sliding_window': c.slidingWindow ?? 0,
  };
  const pattern = slidingPatternKey(c, gptOssSlidingLayers(c.numLayers));
  if (pattern) md['gpt-oss.attention.sliding_window_pattern'] = pattern;
  return md;
}

/**
 * llama.cpp's per-layer `sliding_window_pattern` list of a config's sliding layers, or undefined
 * when they are the architecture's `standard` interleaving (its loader's default).
 */
function slidingPatternKey(
  c: ModelConfig,
  standard: readonly number[],
): GgufTypedValue | undefined {
  const sliding = c.slidingWindowLayers ?? [];
  if (sliding.length === standard.length && sliding.every((l, i) => l === standard[i])) {
    return undefined;
  }
  const set = new Set(sliding);
  return {
    type: 'array',
    itemType: 'bool',
    value: Array.from({ length: c.numLayers }, (_, l) => set.has(l)),
  };
}

/**
 * The `gemma3.*` keys llama.cpp's converter writes beyond the Llama ones, and those its loader
 * reads with defaults (pattern, local RoPE base) when they differ from the defaults.
 *
 * @throws {@link ModelError} `INVALID_ARGUMENT` for an attention scale llama.cpp would not
 *   derive (GGUF has no key for it).
 */
function gemma3Metadata(c: ModelConfig): Record<string, unknown | GgufTypedValue> {
  const md: Record<string, unknown | GgufTypedValue> = {};
  const scale = c.attentionScale ?? 1 / Math.sqrt(c.headDim);
  if (Math.abs(scale - gemma3GgufAttentionScale(c)) > 1e-7 * scale) {
    throw new ModelError(
      'INVALID_ARGUMENT',
      `a gemma3 GGUF cannot hold attention scale ${scale}: llama.cpp derives ${gemma3GgufAttentionScale(c)} from the head size`,
      { details: { attentionScale: scale } },
    );
  }
  if (c.finalLogitSoftcap !== undefined) {
    md['gemma3.final_logit_softcapping'] = { type: 'f32', value: c.finalLogitSoftcap };
  }
  const sliding = c.slidingWindowLayers ?? [];
  if (c.slidingWindow !== null && sliding.length > 0) {
    md['gemma3.attention.sliding_window'] = c.slidingWindow;
    const pattern = slidingPatternKey(c, slidingPatternLayers(c.numLayers));
    if (pattern) md['gemma3.attention.sliding_window_pattern'] = pattern;
    const local = c.localRopeTheta ?? c.ropeTheta;
    if (local !== GEMMA3_LOCAL_ROPE_THETA) {
      md['gemma3.rope.freq_base_swa'] = { type: 'f32', value: local };
    }
  }
  return md;
}
