import { ropeInvFrequencies as kernelsInvFreq } from '@kvasir/attention-kernels';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  expectedTensors,
  type ModelConfig,
  makeModelConfig,
  parameterCount,
  parseHfConfig,
  ropeConfig,
  toHfConfig,
  validateModelConfig,
} from './config.js';
import { ModelError } from './errors.js';

// Excerpts of the real config.json files of each family (fields as published on the Hub).
const LLAMA2_7B = {
  architectures: ['LlamaForCausalLM'],
  bos_token_id: 1,
  eos_token_id: 2,
  hidden_act: 'silu',
  hidden_size: 4096,
  initializer_range: 0.02,
  intermediate_size: 11008,
  max_position_embeddings: 4096,
  model_type: 'llama',
  num_attention_heads: 32,
  num_hidden_layers: 32,
  num_key_value_heads: 32,
  pretraining_tp: 1,
  rms_norm_eps: 1e-5,
  rope_scaling: null,
  tie_word_embeddings: false,
  torch_dtype: 'float16',
  vocab_size: 32000,
};
const LLAMA31_8B_INSTRUCT = {
  architectures: ['LlamaForCausalLM'],
  attention_bias: false,
  attention_dropout: 0.0,
  bos_token_id: 128000,
  eos_token_id: [128001, 128008, 128009],
  hidden_act: 'silu',
  hidden_size: 4096,
  intermediate_size: 14336,
  max_position_embeddings: 131072,
  mlp_bias: false,
  model_type: 'llama',
  num_attention_heads: 32,
  num_hidden_layers: 32,
  num_key_value_heads: 8,
  rms_norm_eps: 1e-5,
  rope_scaling: {
    factor: 8.0,
    low_freq_factor: 1.0,
    high_freq_factor: 4.0,
    original_max_position_embeddings: 8192,
    rope_type: 'llama3',
  },
  rope_theta: 500000.0,
  tie_word_embeddings: false,
  torch_dtype: 'bfloat16',
  vocab_size: 128256,
};
const LLAMA32_1B = {
  ...LLAMA31_8B_INSTRUCT,
  head_dim: 64,
  hidden_size: 2048,
  intermediate_size: 8192,
  num_hidden_layers: 16,
  rope_scaling: {
    factor: 32.0,
    high_freq_factor: 4.0,
    low_freq_factor: 1.0,
    original_max_position_embeddings: 8192,
    rope_type: 'llama3',
  },
  tie_word_embeddings: true,
  eos_token_id: 128001,
};
const MISTRAL_7B = {
  architectures: ['MistralForCausalLM'],
  bos_token_id: 1,
  eos_token_id: 2,
  hidden_act: 'silu',
  hidden_size: 4096,
  initializer_range: 0.02,
  intermediate_size: 14336,
  max_position_embeddings: 32768,
  model_type: 'mistral',
  num_attention_heads: 32,
  num_hidden_layers: 32,
  num_key_value_heads: 8,
  rms_norm_eps: 1e-5,
  rope_theta: 10000.0,
  sliding_window: 4096,
  tie_word_embeddings: false,
  torch_dtype: 'bfloat16',
  vocab_size: 32000,
};
const QWEN25_05B = {
  architectures: ['Qwen2ForCausalLM'],
  attention_dropout: 0.0,
  bos_token_id: 151643,
  eos_token_id: 151643,
  hidden_act: 'silu',
  hidden_size: 896,
  initializer_range: 0.02,
  intermediate_size: 4864,
  max_position_embeddings: 32768,
  max_window_layers: 24,
  model_type: 'qwen2',
  num_attention_heads: 14,
  num_hidden_layers: 24,
  num_key_value_heads: 2,
  rms_norm_eps: 1e-6,
  rope_theta: 1000000.0,
  sliding_window: 32768,
  tie_word_embeddings: true,
  torch_dtype: 'bfloat16',
  use_cache: true,
  use_sliding_window: false,
  vocab_size: 151936,
};
// Qwen/Qwen3-0.6B's config.json.
const QWEN3_06B = {
  architectures: ['Qwen3ForCausalLM'],
  attention_bias: false,
  attention_dropout: 0.0,
  bos_token_id: 151643,
  eos_token_id: 151645,
  head_dim: 128,
  hidden_act: 'silu',
  hidden_size: 1024,
  initializer_range: 0.02,
  intermediate_size: 3072,
  max_position_embeddings: 40960,
  max_window_layers: 28,
  model_type: 'qwen3',
  num_attention_heads: 16,
  num_hidden_layers: 28,
  num_key_value_heads: 8,
  rms_norm_eps: 1e-6,
  rope_scaling: null,
  rope_theta: 1000000,
  sliding_window: null,
  tie_word_embeddings: true,
  torch_dtype: 'bfloat16',
  use_cache: true,
  use_sliding_window: false,
  vocab_size: 151936,
};
// Qwen/Qwen3-30B-A3B's config.json.
/** openai/gpt-oss-20b's config.json (its quantization_config left out). */
const GPT_OSS_20B = {
  architectures: ['GptOssForCausalLM'],
  attention_bias: true,
  attention_dropout: 0.0,
  eos_token_id: 200002,
  experts_per_token: 4,
  head_dim: 64,
  hidden_act: 'silu',
  hidden_size: 2880,
  initial_context_length: 4096,
  initializer_range: 0.02,
  intermediate_size: 2880,
  layer_types: Array.from({ length: 24 }, (_, l) =>
    l % 2 === 0 ? 'sliding_attention' : 'full_attention',
  ),
  max_position_embeddings: 131072,
  model_type: 'gpt_oss',
  num_attention_heads: 64,
  num_experts_per_tok: 4,
  num_hidden_layers: 24,
  num_key_value_heads: 8,
  num_local_experts: 32,
  output_router_logits: false,
  pad_token_id: 199999,
  rms_norm_eps: 1e-5,
  rope_scaling: {
    beta_fast: 32.0,
    beta_slow: 1.0,
    factor: 32.0,
    original_max_position_embeddings: 4096,
    rope_type: 'yarn',
    truncate: false,
  },
  rope_theta: 150000,
  router_aux_loss_coef: 0.9,
  sliding_window: 128,
  swiglu_limit: 7.0,
  tie_word_embeddings: false,
  transformers_version: '4.55.0.dev0',
  use_cache: true,
  vocab_size: 201088,
};

const QWEN3_30B_A3B = {
  architectures: ['Qwen3MoeForCausalLM'],
  attention_bias: false,
  attention_dropout: 0.0,
  bos_token_id: 151643,
  decoder_sparse_step: 1,
  eos_token_id: 151645,
  head_dim: 128,
  hidden_act: 'silu',
  hidden_size: 2048,
  initializer_range: 0.02,
  intermediate_size: 6144,
  max_position_embeddings: 40960,
  max_window_layers: 48,
  mlp_only_layers: [],
  model_type: 'qwen3_moe',
  moe_intermediate_size: 768,
  norm_topk_prob: true,
  num_attention_heads: 32,
  num_experts: 128,
  num_experts_per_tok: 8,
  num_hidden_layers: 48,
  num_key_value_heads: 4,
  output_router_logits: false,
  rms_norm_eps: 1e-6,
  rope_scaling: null,
  rope_theta: 1000000.0,
  router_aux_loss_coef: 0.001,
  sliding_window: null,
  tie_word_embeddings: false,
  torch_dtype: 'bfloat16',
  use_cache: true,
  use_sliding_window: false,
  vocab_size: 151936,
};
// HuggingFaceTB/SmolLM3-3B's config.json (its no_rope_layers: 0 on every fourth layer).
const SMOLLM3_3B = {
  architectures: ['SmolLM3ForCausalLM'],
  attention_bias: false,
  attention_dropout: 0.0,
  bos_token_id: null,
  eos_token_id: 128012,
  hidden_act: 'silu',
  hidden_size: 2048,
  initializer_range: 0.02,
  intermediate_size: 11008,
  max_position_embeddings: 65536,
  max_window_layers: 28,
  mlp_bias: false,
  model_type: 'smollm3',
  no_rope_layer_interval: 4,
  no_rope_layers: Array.from({ length: 36 }, (_, l) => ((l + 1) % 4 === 0 ? 0 : 1)),
  num_attention_heads: 16,
  num_hidden_layers: 36,
  num_key_value_heads: 4,
  pad_token_id: 128004,
  pretraining_tp: 2,
  rms_norm_eps: 1e-6,
  rope_scaling: null,
  rope_theta: 5000000.0,
  sliding_window: null,
  tie_word_embeddings: true,
  torch_dtype: 'bfloat16',
  use_cache: false,
  use_sliding_window: false,
  vocab_size: 128256,
};
const SMOLLM_135M = {
  architectures: ['LlamaForCausalLM'],
  attention_bias: false,
  bos_token_id: 0,
  eos_token_id: 0,
  hidden_act: 'silu',
  hidden_size: 576,
  initializer_range: 0.02,
  intermediate_size: 1536,
  max_position_embeddings: 2048,
  model_type: 'llama',
  num_attention_heads: 9,
  num_hidden_layers: 30,
  num_key_value_heads: 3,
  rms_norm_eps: 1e-5,
  rope_scaling: null,
  rope_theta: 10000.0,
  tie_word_embeddings: true,
  vocab_size: 49152,
};
const TINYLLAMA = {
  architectures: ['LlamaForCausalLM'],
  bos_token_id: 1,
  eos_token_id: 2,
  hidden_act: 'silu',
  hidden_size: 2048,
  intermediate_size: 5632,
  max_position_embeddings: 2048,
  model_type: 'llama',
  num_attention_heads: 32,
  num_hidden_layers: 22,
  num_key_value_heads: 4,
  rms_norm_eps: 1e-5,
  rope_scaling: null,
  tie_word_embeddings: false,
  vocab_size: 32000,
};

function codeOf(f: () => unknown): string | undefined {
  try {
    f();
  } catch (e) {
    expect(ModelError.isInstance(e)).toBe(true);
    return (e as ModelError).code;
  }
  return undefined;
}

/** google/gemma-3-1b-it's config.json (text-only Gemma3ForCausalLM). */
const GEMMA3_1B = {
  architectures: ['Gemma3ForCausalLM'],
  attention_bias: false,
  attn_logit_softcapping: null,
  bos_token_id: 2,
  eos_token_id: [1, 106],
  final_logit_softcapping: null,
  head_dim: 256,
  hidden_activation: 'gelu_pytorch_tanh',
  hidden_size: 1152,
  intermediate_size: 6912,
  max_position_embeddings: 32768,
  model_type: 'gemma3_text',
  num_attention_heads: 4,
  num_hidden_layers: 26,
  num_key_value_heads: 1,
  query_pre_attn_scalar: 256,
  rms_norm_eps: 1e-6,
  rope_local_base_freq: 10000,
  rope_scaling: null,
  rope_theta: 1000000,
  sliding_window: 512,
  sliding_window_pattern: 6,
  vocab_size: 262144,
};

describe('parseHfConfig', () => {
  it('reads Gemma 3 1B (five sliding layers to one global, GELU, sandwich norms, scaled embeddings)', () => {
    const c = parseHfConfig(GEMMA3_1B);
    expect(c).toMatchObject({
      architecture: 'gemma3',
      qkNorm: true,
      sandwichNorms: true,
      mlpActivation: 'gelu-tanh',
      embeddingScale: Math.sqrt(1152),
      attentionScale: 1 / 16,
      slidingWindow: 512,
      localRopeTheta: 10000,
      ropeTheta: 1e6,
      tieWordEmbeddings: true,
      eosTokenIds: [1, 106],
    });
    const globals = [5, 11, 17, 23];
    expect(c.slidingWindowLayers).toEqual(
      Array.from({ length: 26 }, (_, l) => l).filter((l) => !globals.includes(l)),
    );
    expect(c.finalLogitSoftcap).toBeUndefined();
    expect(Math.round(parameterCount(c) / 1e6)).toBe(1000);
    // Transformers' newer layer_types list says the same.
    const { sliding_window_pattern: _, ...rest } = GEMMA3_1B;
    const layerTypes = Array.from({ length: 26 }, (_, l) =>
      globals.includes(l) ? 'full_attention' : 'sliding_attention',
    );
    expect(parseHfConfig({ ...rest, layer_types: layerTypes })).toEqual(c);
    // Gemma 3 4B's text model: linear RoPE scaling (global layers), its own query scalar.
    const four = parseHfConfig({
      ...GEMMA3_1B,
      rope_scaling: { rope_type: 'linear', factor: 8 },
      query_pre_attn_scalar: 168,
      final_logit_softcapping: 30,
    });
    expect(four.ropeScaling).toEqual({ type: 'linear', factor: 8 });
    expect(four.attentionScale).toBeCloseTo(1 / Math.sqrt(168), 12);
    expect(four.finalLogitSoftcap).toBe(30);
    // What Gemma 3 does not have is refused with a typed code naming it.
    expect(codeOf(() => parseHfConfig({ ...GEMMA3_1B, attn_logit_softcapping: 50 }))).toBe(
      'UNSUPPORTED_ARCHITECTURE',
    );
    expect(codeOf(() => parseHfConfig({ ...GEMMA3_1B, hidden_activation: 'silu' }))).toBe(
      'UNSUPPORTED_ARCHITECTURE',
    );
    expect(
      codeOf(() => parseHfConfig({ ...rest, layer_types: ['sliding_attention'] })),
      'one type per layer',
    ).toBe('INVALID_CONFIG');
    expect(codeOf(() => parseHfConfig({ ...GEMMA3_1B, sliding_window: null }))).toBe(
      'INVALID_CONFIG',
    );
  });

  it('reads Llama 2 (MHA, defaults for absent rope_theta)', () => {
    const c = parseHfConfig(LLAMA2_7B);
    expect(c).toMatchObject({
      architecture: 'llama',
      numHeads: 32,
      numKvHeads: 32,
      headDim: 128,
      ropeTheta: 10000,
      ropeScaling: null,
      bosTokenId: 1,
      eosTokenIds: [2],
      attentionBias: false,
      tieWordEmbeddings: false,
    });
    // 6.74B parameters is the published size of Llama 2 7B.
    expect(Math.round(parameterCount(c) / 1e7)).toBe(674);
  });

  it('reads Llama 3.1 (GQA, llama3 RoPE scaling, several eos ids)', () => {
    const c = parseHfConfig(LLAMA31_8B_INSTRUCT);
    expect(c.numKvHeads).toBe(8);
    expect(c.eosTokenIds).toEqual([128001, 128008, 128009]);
    expect(c.ropeScaling).toEqual({
      type: 'llama3',
      factor: 8,
      lowFreqFactor: 1,
      highFreqFactor: 4,
      originalMaxPositionEmbeddings: 8192,
    });
    expect(Math.round(parameterCount(c) / 1e8)).toBe(80);
  });

  it('reads Llama 3.2 1B (explicit head_dim, tied embeddings)', () => {
    const c = parseHfConfig(LLAMA32_1B);
    expect(c.headDim).toBe(64);
    expect(c.tieWordEmbeddings).toBe(true);
    expect(expectedTensors(c).some((t) => t.name === 'lm_head.weight')).toBe(false);
    expect(Math.round(parameterCount(c) / 1e7)).toBe(124);
  });

  it('reads Mistral (sliding window)', () => {
    const c = parseHfConfig(MISTRAL_7B);
    expect(c.architecture).toBe('mistral');
    expect(c.slidingWindow).toBe(4096);
    expect(c.attentionBias).toBe(false);
  });

  it('reads Qwen2.5 (QKV bias without o_proj bias, unused sliding window ignored)', () => {
    const c = parseHfConfig(QWEN25_05B);
    expect(c.architecture).toBe('qwen2');
    expect(c.attentionBias).toBe(true);
    expect(c.attentionOutputBias).toBe(false);
    expect(c.slidingWindow).toBeNull();
    expect(c.headDim).toBe(64);
    const names = expectedTensors(c).map((t) => t.name);
    expect(names).toContain('model.layers.0.self_attn.k_proj.bias');
    expect(names).not.toContain('model.layers.0.self_attn.o_proj.bias');
    expect(
      expectedTensors(c).find((t) => t.name === 'model.layers.0.self_attn.k_proj.bias')?.shape,
    ).toEqual([128]);
    expect(Math.round(parameterCount(c) / 1e6)).toBe(494);
  });

  it('reads Qwen3 0.6B (per-head Q/K norm tensors, no QKV bias, head_dim 128 over hidden 1024)', () => {
    const c = parseHfConfig(QWEN3_06B);
    expect(c.architecture).toBe('qwen3');
    expect(c.qkNorm).toBe(true);
    expect([c.attentionBias, c.attentionOutputBias, c.headDim]).toEqual([false, false, 128]);
    const norm = expectedTensors(c).find(
      (t) => t.name === 'model.layers.0.self_attn.q_norm.weight',
    );
    expect(norm?.shape).toEqual([128]);
    expect(Math.round(parameterCount(c) / 1e6)).toBe(596);
  });

  it('reads SmolLM3 3B (NoPE on every fourth layer, from no_rope_layers or the interval)', () => {
    const c = parseHfConfig(SMOLLM3_3B);
    expect(c.architecture).toBe('smollm3');
    expect(c.noRopeLayers).toEqual([3, 7, 11, 15, 19, 23, 27, 31, 35]);
    expect(c.qkNorm).toBeUndefined();
    const { no_rope_layers: _, ...byInterval } = SMOLLM3_3B;
    expect(parseHfConfig(byInterval).noRopeLayers).toEqual(c.noRopeLayers);
    expect(parseHfConfig({ ...byInterval, no_rope_layer_interval: 6 }).noRopeLayers).toEqual([
      5, 11, 17, 23, 29, 35,
    ]);
    expect(Math.round(parameterCount(c) / 1e7)).toBe(308);
    expect(
      codeOf(() => parseHfConfig({ ...SMOLLM3_3B, no_rope_layers: [1, 0] })),
      'one flag per layer',
    ).toBe('INVALID_CONFIG');
  });

  it("reads gpt-oss-20b's shape (sinks, biases, even layers sliding over 128, 32 experts with biases, top 4) and refuses its YaRN in config.json", () => {
    const { rope_scaling: yarn, ...plain } = GPT_OSS_20B;
    const c = parseHfConfig(plain);
    expect(c).toMatchObject({
      architecture: 'gpt-oss',
      attentionBias: true,
      attentionOutputBias: true,
      attentionSinks: true,
      slidingWindow: 128,
      headDim: 64,
    });
    expect(c.slidingWindowLayers).toEqual(Array.from({ length: 12 }, (_, i) => 2 * i));
    expect(c.moe).toEqual({
      numExperts: 32,
      numExpertsPerToken: 4,
      expertIntermediateSize: 2880,
      normTopkProb: true,
      expertBias: true,
      activation: 'swiglu-oai',
    });
    const names = expectedTensors(c).map((t) => t.name);
    for (const n of [
      'model.layers.0.self_attn.sinks.weight',
      'model.layers.0.mlp.gate.bias',
      'model.layers.23.mlp.experts.31.down_proj.bias',
      'model.layers.0.self_attn.o_proj.bias',
    ]) {
      expect(names).toContain(n);
    }
    // 20.9B parameters, as its model card says.
    expect(Math.round(parameterCount(c) / 1e8)).toBe(209);
    expect(parseHfConfig(toHfConfig(c))).toEqual(c);
    expect(
      codeOf(() => parseHfConfig(GPT_OSS_20B)),
      'YaRN in config.json',
    ).toBe('UNSUPPORTED_ARCHITECTURE');
    expect(codeOf(() => parseHfConfig({ ...plain, swiglu_limit: 10 }))).toBe(
      'UNSUPPORTED_ARCHITECTURE',
    );
    expect(codeOf(() => parseHfConfig({ ...plain, layer_types: ['full_attention'] }))).toBe(
      'INVALID_CONFIG',
    );
    expect(
      codeOf(() => validateModelConfig({ ...c, architecture: 'qwen3moe', qkNorm: true })),
      'biased OAI experts on qwen3moe',
    ).toBe('INVALID_CONFIG');
    expect(
      codeOf(() =>
        makeModelConfig({
          architecture: 'llama',
          hiddenSize: 64,
          intermediateSize: 64,
          numLayers: 1,
          numHeads: 2,
          vocabSize: 300,
          attentionSinks: true,
        }),
      ),
      'sinks on llama',
    ).toBe('INVALID_CONFIG');
    expect(yarn.rope_type).toBe('yarn');
  });

  it('reads Qwen3-30B-A3B (128 experts, top 8, renormalized; Q/K norm; every layer sparse)', () => {
    const c = parseHfConfig(QWEN3_30B_A3B);
    expect(c.architecture).toBe('qwen3moe');
    expect(c.qkNorm).toBe(true);
    expect(c.moe).toEqual({
      numExperts: 128,
      numExpertsPerToken: 8,
      expertIntermediateSize: 768,
      normTopkProb: true,
    });
    const names = expectedTensors(c).map((t) => t.name);
    expect(names).toContain('model.layers.47.mlp.experts.127.down_proj.weight');
    expect(names).toContain('model.layers.0.mlp.gate.weight');
    expect(names).not.toContain('model.layers.0.mlp.gate_proj.weight');
    // 30.5B parameters in all, as its model card says.
    expect(Math.round(parameterCount(c) / 1e8)).toBe(305);
    for (const [key, value] of [
      ['decoder_sparse_step', 2],
      ['mlp_only_layers', [0, 1]],
    ] as const) {
      let error: unknown;
      try {
        parseHfConfig({ ...QWEN3_30B_A3B, [key]: value });
      } catch (e) {
        error = e;
      }
      expect((error as ModelError).code, key).toBe('UNSUPPORTED_ARCHITECTURE');
      expect((error as Error).message).toContain('dense MLP layers');
    }
    expect(codeOf(() => parseHfConfig({ ...QWEN3_30B_A3B, num_experts: undefined }))).toBe(
      'INVALID_CONFIG',
    );
    expect(codeOf(() => parseHfConfig({ ...QWEN3_30B_A3B, num_experts_per_tok: 129 }))).toBe(
      'INVALID_CONFIG',
    );
    expect(codeOf(() => makeModelConfig({ ...c, architecture: 'qwen3' }))).toBe('INVALID_CONFIG');
    const { moe: _, ...dense } = c;
    expect(codeOf(() => makeModelConfig(dense))).toBe('INVALID_CONFIG');
  });

  it('reads SmolLM (9 heads over 3 KV heads) and TinyLlama (GQA 32/4)', () => {
    const s = parseHfConfig(SMOLLM_135M);
    expect([s.numHeads, s.numKvHeads, s.headDim]).toEqual([9, 3, 64]);
    expect(Math.round(parameterCount(s) / 1e6)).toBe(135);
    const t = parseHfConfig(TINYLLAMA);
    expect([t.numHeads, t.numKvHeads, t.headDim]).toEqual([32, 4, 64]);
    expect(Math.round(parameterCount(t) / 1e7)).toBe(110);
  });

  it('reads MQA (one KV head)', () => {
    const c = parseHfConfig({ ...TINYLLAMA, num_key_value_heads: 1 });
    expect(
      expectedTensors(c).find((t) => t.name === 'model.layers.0.self_attn.v_proj.weight')?.shape,
    ).toEqual([64, 2048]);
  });

  it('refuses what it cannot run, with typed codes', () => {
    expect(
      codeOf(() =>
        parseHfConfig({ ...LLAMA2_7B, architectures: ['GPT2LMHeadModel'], model_type: 'gpt2' }),
      ),
    ).toBe('UNSUPPORTED_ARCHITECTURE');
    expect(codeOf(() => parseHfConfig({ ...LLAMA2_7B, hidden_act: 'gelu' }))).toBe(
      'UNSUPPORTED_ARCHITECTURE',
    );
    expect(
      codeOf(() => parseHfConfig({ ...LLAMA2_7B, rope_scaling: { type: 'yarn', factor: 4 } })),
    ).toBe('UNSUPPORTED_ARCHITECTURE');
    expect(codeOf(() => parseHfConfig({ ...LLAMA2_7B, hidden_size: undefined }))).toBe(
      'INVALID_CONFIG',
    );
    expect(codeOf(() => parseHfConfig({ ...LLAMA2_7B, num_key_value_heads: 5 }))).toBe(
      'INVALID_CONFIG',
    );
    expect(codeOf(() => parseHfConfig({ ...LLAMA2_7B, num_hidden_layers: 1.5 }))).toBe(
      'INVALID_CONFIG',
    );
    expect(codeOf(() => parseHfConfig({ ...LLAMA2_7B, eos_token_id: 99999 }))).toBe(
      'INVALID_CONFIG',
    );
    expect(codeOf(() => parseHfConfig('nope'))).toBe('INVALID_CONFIG');
  });

  it('refuses a size no model has (num_hidden_layers: 1e9) at once, naming the key', () => {
    const cases: [string, number][] = [
      ['num_hidden_layers', 1e9],
      ['num_hidden_layers', 4097],
      ['hidden_size', 2 ** 31],
      ['intermediate_size', 2 ** 40],
      ['num_attention_heads', 2 ** 20],
      ['num_key_value_heads', 2 ** 20],
      ['head_dim', 2 ** 31],
      ['vocab_size', 2 ** 30],
      ['max_position_embeddings', 2 ** 40],
    ];
    for (const [key, value] of cases) {
      let error: unknown;
      try {
        parseHfConfig({ ...LLAMA2_7B, [key]: value });
      } catch (e) {
        error = e;
      }
      expect(ModelError.isInstance(error), key).toBe(true);
      expect((error as ModelError).code).toBe('INVALID_CONFIG');
      expect((error as Error).message).toContain(`"${key}" is ${value}, above the limit of`);
    }
    // A largest real model (Llama 3.1 405B) is well inside the limits.
    expect(
      parseHfConfig({
        ...LLAMA31_8B_INSTRUCT,
        hidden_size: 16384,
        intermediate_size: 53248,
        num_attention_heads: 128,
        num_hidden_layers: 126,
      }).numLayers,
    ).toBe(126);
  });
});

describe('validateModelConfig', () => {
  it('refuses sizes above the limits however the config was built', () => {
    const ok = { hiddenSize: 64, intermediateSize: 96, numLayers: 2, numHeads: 4, vocabSize: 384 };
    expect(() => makeModelConfig({ ...ok, numLayers: 2 ** 31 })).toThrow(
      /numLayers is 2147483648, above the limit of 4096/,
    );
    expect(() => validateModelConfig({ ...makeModelConfig(ok), vocabSize: 2 ** 25 })).toThrow(
      /vocabSize is 33554432, above the limit/,
    );
  });
});

describe('toHfConfig', () => {
  it('round-trips every family', () => {
    for (const j of [
      LLAMA2_7B,
      LLAMA31_8B_INSTRUCT,
      LLAMA32_1B,
      MISTRAL_7B,
      QWEN25_05B,
      QWEN3_06B,
      QWEN3_30B_A3B,
      { ...QWEN3_30B_A3B, norm_topk_prob: false },
      SMOLLM3_3B,
      SMOLLM_135M,
      TINYLLAMA,
      GEMMA3_1B,
      {
        ...GEMMA3_1B,
        rope_scaling: { rope_type: 'linear', factor: 8 },
        final_logit_softcapping: 30,
      },
    ]) {
      const c = parseHfConfig(j);
      expect(parseHfConfig(JSON.parse(JSON.stringify(toHfConfig(c))))).toEqual(c);
    }
  });

  it('round-trips random valid configs', () => {
    fc.assert(
      fc.property(
        fc.record({
          kv: fc.integer({ min: 1, max: 4 }),
          group: fc.integer({ min: 1, max: 4 }),
          halfHead: fc.integer({ min: 1, max: 64 }),
          layers: fc.integer({ min: 1, max: 8 }),
          arch: fc.constantFrom(
            'llama' as const,
            'mistral' as const,
            'qwen2' as const,
            'qwen3' as const,
            'smollm3' as const,
          ),
          tie: fc.boolean(),
          theta: fc.double({ min: 100, max: 1e7, noNaN: true }),
        }),
        (r) => {
          const heads = r.kv * r.group;
          const c = makeModelConfig({
            architecture: r.arch,
            hiddenSize: heads * r.halfHead * 2,
            intermediateSize: 3 * r.halfHead,
            numLayers: r.layers,
            numHeads: heads,
            numKvHeads: r.kv,
            vocabSize: 300,
            tieWordEmbeddings: r.tie,
            ropeTheta: r.theta,
          });
          expect(parseHfConfig(JSON.parse(JSON.stringify(toHfConfig(c))))).toEqual(c);
        },
      ),
    );
  });
});

const smallConfig = () =>
  makeModelConfig({
    hiddenSize: 16,
    intermediateSize: 8,
    numLayers: 1,
    numHeads: 2,
    vocabSize: 10,
  });

// The config's RoPE, computed by @kvasir/attention-kernels through ropeConfig.
const ropeInvFrequencies = (c: ModelConfig) => kernelsInvFreq(ropeConfig(c, 1));

describe('ropeConfig', () => {
  it('is theta^(-2i/d) without scaling', () => {
    const c = parseHfConfig(LLAMA2_7B);
    const f = ropeInvFrequencies(c);
    expect(f.length).toBe(64);
    expect(f[0]).toBe(1);
    expect(f[10]).toBeCloseTo(10000 ** (-20 / 128), 15);
  });

  it('applies Llama 3 band scaling: high frequencies kept, low ones divided, a monotone ramp between', () => {
    const plain = ropeInvFrequencies({ ...parseHfConfig(LLAMA31_8B_INSTRUCT), ropeScaling: null });
    const scaled = ropeInvFrequencies(parseHfConfig(LLAMA31_8B_INSTRUCT));
    let sawMid = false;
    for (let i = 0; i < plain.length; i++) {
      const wavelen = (2 * Math.PI) / plain[i]!;
      const ratio = plain[i]! / scaled[i]!;
      if (wavelen < 8192 / 4) expect(ratio).toBe(1);
      else if (wavelen > 8192 / 1) expect(ratio).toBeCloseTo(8, 12);
      else {
        sawMid = true;
        expect(ratio).toBeGreaterThan(1);
        expect(ratio).toBeLessThan(8);
      }
      if (i > 0) expect(ratio).toBeGreaterThanOrEqual(plain[i - 1]! / scaled[i - 1]! - 1e-12);
    }
    expect(sawMid).toBe(true);
  });

  it('applies linear and explicit factors', () => {
    const base = smallConfig();
    const lin = ropeInvFrequencies({ ...base, ropeScaling: { type: 'linear', factor: 4 } });
    const ff = ropeInvFrequencies({
      ...base,
      ropeScaling: { type: 'freq-factors', factors: [1, 2, 3, 4] },
    });
    const p = ropeInvFrequencies(base);
    for (let i = 0; i < 4; i++) {
      expect(lin[i]).toBeCloseTo(p[i]! / 4, 15);
      expect(ff[i]).toBeCloseTo(p[i]! / (i + 1), 15);
    }
  });

  it('refuses a theta or scaling the kernels cannot use as INVALID_CONFIG, by name', () => {
    const base = smallConfig();
    const cases: [Partial<ModelConfig>, RegExp][] = [
      [{ ropeTheta: 1 }, /rope_theta/],
      [{ ropeScaling: { type: 'linear', factor: 0 } }, /rope scaling factors/],
      [{ ropeScaling: { type: 'freq-factors', factors: [1, 2, -1, 4] } }, /rope scaling factors/],
    ];
    for (const [patch, message] of cases) {
      expect(() => validateModelConfig({ ...base, ...patch })).toThrow(
        expect.objectContaining({
          code: 'INVALID_CONFIG',
          message: expect.stringMatching(message),
        }),
      );
    }
  });
});
