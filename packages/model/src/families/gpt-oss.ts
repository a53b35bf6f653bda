// gpt-oss (OpenAI's open-weight mixture of experts; HF `GptOssForCausalLM`, GGUF `gpt-oss`) in
// ModelConfig's terms: Llama's block with biases on q/k/v/o, a learned attention-sink logit per
// head (`attentionSinks`), sliding-window layers (window 128) alternating with full ones (the
// even layers slide, as llama.cpp's `set_swa_pattern(2)` places them), and a mixture of experts
// whose router and experts carry biases, whose experts use OpenAI's clamped SwiGLU, and whose
// chosen experts are weighted by a softmax over their k logits (softmax, top-k, renormalized).
// config.ts imports this file: it takes configs by their fields' shape, not by ModelConfig.
import { ModelError } from '../errors.js';
import { slidingPatternLayers } from './gemma3.js';

/** gpt-oss's sliding-window interleaving: of every two layers, the first slides. */
export const GPT_OSS_SLIDING_PATTERN = 2;

/** gpt-oss-20b's and -120b's window (`sliding_window`). */
export const GPT_OSS_WINDOW = 128;

/** OpenAI's SwiGLU: `min(g, 7) · σ(1.702 · min(g, 7)) · (clamp(u, −7, 7) + 1)`. */
export const SWIGLU_OAI = { alpha: 1.702, limit: 7 } as const;

/** The sliding-window layers of a gpt-oss model: the even ones. */
export function gptOssSlidingLayers(numLayers: number): number[] {
  return slidingPatternLayers(numLayers, GPT_OSS_SLIDING_PATTERN);
}

/** Fields gpt-oss sets over Llama's (ModelConfig's, by shape). */
export interface GptOssFields {
  readonly slidingWindow: number;
  readonly attentionBias: boolean;
  readonly attentionOutputBias: boolean;
  readonly attentionSinks: boolean;
  readonly slidingWindowLayers: readonly number[];
}

/** gpt-oss's fixed choices for a model of `numLayers` layers. */
export function gptOssDefaults(numLayers: number): GptOssFields {
  return {
    slidingWindow: GPT_OSS_WINDOW,
    attentionBias: true,
    attentionOutputBias: true,
    attentionSinks: true,
    slidingWindowLayers: gptOssSlidingLayers(numLayers),
  };
}

/** The mixture-of-experts fields of a gpt-oss config (MoeConfig's, by shape). */
export function gptOssMoe(numExperts: number, numExpertsPerToken: number, width: number) {
  return {
    numExperts,
    numExpertsPerToken,
    expertIntermediateSize: width,
    // A softmax over the chosen k logits equals the k largest probabilities renormalized.
    normTopkProb: true,
    expertBias: true,
    activation: 'swiglu-oai' as const,
  };
}

/**
 * The sliding-window layers from config.json's `layer_types` (`sliding_attention` /
 * `full_attention`), or the alternation when it has none.
 *
 * @throws {@link ModelError} `INVALID_CONFIG` for a `layer_types` of the wrong length or kinds.
 */
export function gptOssLayersFromHf(layerTypes: unknown, numLayers: number): number[] {
  if (layerTypes === undefined || layerTypes === null) return gptOssSlidingLayers(numLayers);
  if (
    !Array.isArray(layerTypes) ||
    layerTypes.length !== numLayers ||
    !layerTypes.every((t) => t === 'sliding_attention' || t === 'full_attention')
  ) {
    throw new ModelError(
      'INVALID_CONFIG',
      `config.json: layer_types must list ${numLayers} of 'sliding_attention' / 'full_attention'`,
      { details: { key: 'layer_types' } },
    );
  }
  return layerTypes.flatMap((t, l) => (t === 'sliding_attention' ? [l] : []));
}

/** llama.cpp's per-layer sliding flags of a `sliding_window_pattern` array key, or undefined. */
export function gptOssLayersFromGguf(pattern: unknown, numLayers: number): number[] | undefined {
  if (!Array.isArray(pattern)) return undefined;
  if (pattern.length !== numLayers) {
    throw new ModelError(
      'INVALID_CONFIG',
      `GGUF gpt-oss.attention.sliding_window_pattern has ${pattern.length} entries for ${numLayers} layers`,
    );
  }
  return pattern.flatMap((s, l) => (s ? [l] : []));
}
