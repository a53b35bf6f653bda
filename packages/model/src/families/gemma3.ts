// Gemma 3's text model (HF `Gemma3ForCausalLM`, GGUF `gemma3`) in ModelConfig's terms: the
// parts of its config that neither the Llama block nor another family has, read from
// config.json and from GGUF metadata as llama.cpp reads them.
// config.ts imports this file: it takes configs by their fields' shape, not by ModelConfig.
import { ModelError } from '../errors.js';

/** The fields of a model config Gemma 3 reads or sets (ModelConfig's, by shape). */
export interface GemmaConfigFields {
  readonly architecture: string;
  readonly numLayers: number;
  readonly hiddenSize: number;
  readonly numHeads: number;
  readonly headDim: number;
  readonly ropeTheta: number;
  readonly attentionBias: boolean;
  readonly attentionOutputBias: boolean;
  readonly slidingWindow: number | null;
  readonly qkNorm?: boolean;
  readonly embeddingScale?: number;
  readonly mlpActivation?: 'silu' | 'gelu-tanh';
  readonly sandwichNorms?: boolean;
  readonly attentionScale?: number;
  readonly slidingWindowLayers?: readonly number[];
  readonly localRopeTheta?: number;
  readonly finalLogitSoftcap?: number;
}

/** Fields a Gemma 3 reader sets over the Llama ones. */
type GemmaExtras = Partial<Omit<GemmaConfigFields, 'architecture'>>;

/** Gemma 3's interleaving: of every six layers, the first five are sliding-window layers. */
export const GEMMA3_SLIDING_PATTERN = 6;

/** RoPE base of Gemma 3's sliding-window layers (`rope_local_base_freq`, llama.cpp's default). */
export const GEMMA3_LOCAL_ROPE_THETA = 10_000;

/**
 * The sliding-window layers of an interleaving of `pattern` (llama.cpp's `set_swa_pattern`:
 * layer `l` is local when `l % pattern < pattern - 1`; `pattern` 0 makes every layer local).
 */
export function slidingPatternLayers(
  numLayers: number,
  pattern = GEMMA3_SLIDING_PATTERN,
): number[] {
  const out: number[] = [];
  for (let l = 0; l < numLayers; l++) if (pattern === 0 || l % pattern < pattern - 1) out.push(l);
  return out;
}

/**
 * Added to every RMSNorm weight of a checkpoint as it loads. Gemma's RMSNorm multiplies by
 * `1 + w` and HF checkpoints store `w`; llama.cpp's converter adds the 1 into GGUF files, and
 * this package runs every norm as a plain multiply, so only Gemma 3 safetensors need it.
 */
export function normWeightShift(reader: {
  readonly format: 'safetensors' | 'gguf';
  readonly config: { readonly architecture: string };
}): number {
  return reader.config.architecture === 'gemma3' && reader.format === 'safetensors' ? 1 : 0;
}

/**
 * llama.cpp's attention scale for a `gemma3` GGUF, which has no key for it: `1 / sqrt(headDim)`,
 * except on the 62-layer (27B) model, `1 / sqrt(hiddenSize / numHeads)`
 * (`query_pre_attn_scalar` as Google's gemma_pytorch sets it).
 */
export function gemma3GgufAttentionScale(
  c: Pick<GemmaConfigFields, 'numLayers' | 'hiddenSize' | 'numHeads' | 'headDim'>,
): number {
  return c.numLayers === 62
    ? 1 / Math.sqrt(Math.floor(c.hiddenSize / c.numHeads))
    : 1 / Math.sqrt(c.headDim);
}

function bad(message: string, details?: Record<string, unknown>): ModelError {
  return new ModelError('INVALID_CONFIG', message, details ? { details } : undefined);
}

function positive(c: Record<string, unknown>, key: string, fallback: number): number {
  const v = c[key];
  if (v === undefined || v === null) return fallback;
  if (typeof v !== 'number' || !Number.isFinite(v) || v <= 0) {
    throw bad(`config.json: "${key}" must be a positive number, got ${JSON.stringify(v)}`, { key });
  }
  return v;
}

/**
 * Gemma 3's own fields from its `config.json` (`Gemma3TextConfig`): GELU-tanh MLP, sandwich
 * norms, embeddings scaled by `sqrt(hidden_size)`, the query scale from
 * `query_pre_attn_scalar`, the sliding-window layers from `layer_types` (or
 * `sliding_window_pattern`, default 6) with their window and local RoPE base, and the final
 * logit soft cap.
 *
 * @throws {@link ModelError} `UNSUPPORTED_ARCHITECTURE` for an attention logit soft cap (Gemma 2's,
 *   which Gemma 3 dropped) or another activation; `INVALID_CONFIG` for malformed fields.
 */
export function gemma3FromHf(
  c: Record<string, unknown>,
  numLayers: number,
  hiddenSize: number,
  headDim: number,
): GemmaExtras & { slidingWindow: number | null } {
  const act = c.hidden_activation ?? c.hidden_act ?? 'gelu_pytorch_tanh';
  if (act !== 'gelu_pytorch_tanh' && act !== 'gelu_tanh') {
    throw new ModelError(
      'UNSUPPORTED_ARCHITECTURE',
      `config.json: Gemma 3 with hidden_activation ${JSON.stringify(act)} is not supported (only gelu_pytorch_tanh)`,
    );
  }
  if (c.attn_logit_softcapping != null) {
    throw new ModelError(
      'UNSUPPORTED_ARCHITECTURE',
      'config.json: attn_logit_softcapping is not supported (Gemma 3 has none; Gemma 2 had it)',
    );
  }
  let sliding: number[];
  if (Array.isArray(c.layer_types)) {
    const types = c.layer_types as unknown[];
    if (
      types.length !== numLayers ||
      !types.every((t) => t === 'sliding_attention' || t === 'full_attention')
    ) {
      throw bad(
        `config.json: "layer_types" must list "sliding_attention" or "full_attention" for each of ${numLayers} layers`,
        { key: 'layer_types' },
      );
    }
    sliding = types.flatMap((t, l) => (t === 'sliding_attention' ? [l] : []));
  } else {
    const pattern = c.sliding_window_pattern ?? GEMMA3_SLIDING_PATTERN;
    if (typeof pattern !== 'number' || !Number.isInteger(pattern) || pattern < 0) {
      throw bad('config.json: "sliding_window_pattern" must be a non-negative integer', {
        key: 'sliding_window_pattern',
      });
    }
    // Transformers: layer l slides unless (l + 1) % pattern == 0, as llama.cpp's pattern.
    sliding = pattern === 1 ? [] : slidingPatternLayers(numLayers, pattern);
  }
  const window = c.sliding_window;
  let slidingWindow: number | null = null;
  if (sliding.length > 0) {
    if (typeof window !== 'number' || !Number.isInteger(window) || window <= 0) {
      throw bad('config.json: Gemma 3 needs a positive integer "sliding_window"', {
        key: 'sliding_window',
      });
    }
    slidingWindow = window;
  }
  const cap = c.final_logit_softcapping;
  return {
    embeddingScale: Math.sqrt(hiddenSize),
    mlpActivation: 'gelu-tanh',
    sandwichNorms: true,
    qkNorm: true,
    attentionScale: 1 / Math.sqrt(positive(c, 'query_pre_attn_scalar', headDim)),
    slidingWindow,
    ...(sliding.length > 0
      ? {
          slidingWindowLayers: sliding,
          localRopeTheta: positive(c, 'rope_local_base_freq', GEMMA3_LOCAL_ROPE_THETA),
        }
      : {}),
    ...(cap != null ? { finalLogitSoftcap: positive(c, 'final_logit_softcapping', 30) } : {}),
  };
}

/** The defaults {@link makeModelConfig} gives a `gemma3` config (Gemma 3 1B's shape of layers). */
export function gemma3Defaults(
  numLayers: number,
  hiddenSize: number,
): GemmaExtras & {
  tieWordEmbeddings: boolean;
  rmsNormEps: number;
} {
  return {
    embeddingScale: Math.sqrt(hiddenSize),
    mlpActivation: 'gelu-tanh',
    sandwichNorms: true,
    qkNorm: true,
    tieWordEmbeddings: true,
    rmsNormEps: 1e-6,
    ropeTheta: 1_000_000,
    slidingWindow: 512,
    slidingWindowLayers: slidingPatternLayers(numLayers),
    localRopeTheta: GEMMA3_LOCAL_ROPE_THETA,
  };
}

/**
 * Gemma 3's keys of `config.json` for {@link toHfConfig}.
 *
 * @throws {@link ModelError} `INVALID_CONFIG` when the config is not Gemma 3's block.
 */
export function gemma3ToHf(c: GemmaConfigFields, out: Record<string, unknown>): void {
  if (
    !c.qkNorm ||
    !c.sandwichNorms ||
    c.mlpActivation !== 'gelu-tanh' ||
    c.embeddingScale !== Math.sqrt(c.hiddenSize) ||
    c.attentionBias ||
    c.attentionOutputBias
  ) {
    throw bad(
      'model config: Gemma 3 has Q/K norms, sandwich norms, GELU-tanh, embeddings scaled by sqrt(hidden) and no attention bias',
    );
  }
  const sliding = new Set(c.slidingWindowLayers ?? []);
  out.hidden_activation = 'gelu_pytorch_tanh';
  delete out.hidden_act;
  out.attention_bias = false;
  out.query_pre_attn_scalar = 1 / (c.attentionScale ?? 1 / Math.sqrt(c.headDim)) ** 2;
  out.sliding_window = c.slidingWindow;
  out.layer_types = Array.from({ length: c.numLayers }, (_, l) =>
    sliding.has(l) ? 'sliding_attention' : 'full_attention',
  );
  out.rope_local_base_freq = c.localRopeTheta ?? c.ropeTheta;
  out.final_logit_softcapping = c.finalLogitSoftcap ?? null;
  out.attn_logit_softcapping = null;
}

/**
 * Checks the fields Gemma 3 brought into {@link ModelConfig}.
 *
 * @throws {@link ModelError} `INVALID_CONFIG` naming the field.
 */
export function validateGemmaFields(c: GemmaConfigFields): void {
  const pos = (v: number | undefined, name: string) => {
    if (v !== undefined && !(Number.isFinite(v) && v > 0)) {
      throw bad(`model config: ${name} must be finite and positive, got ${v}`, { [name]: v });
    }
  };
  pos(c.embeddingScale, 'embeddingScale');
  pos(c.attentionScale, 'attentionScale');
  pos(c.finalLogitSoftcap, 'finalLogitSoftcap');
  if (
    c.localRopeTheta !== undefined &&
    !(c.localRopeTheta > 1 && Number.isFinite(c.localRopeTheta))
  ) {
    throw bad(`model config: localRopeTheta must be finite and above 1, got ${c.localRopeTheta}`);
  }
  if (
    c.mlpActivation !== undefined &&
    c.mlpActivation !== 'silu' &&
    c.mlpActivation !== 'gelu-tanh'
  ) {
    throw bad(`model config: unknown mlpActivation ${String(c.mlpActivation)}`);
  }
  if (c.slidingWindowLayers !== undefined) {
    if (c.slidingWindow === null && c.slidingWindowLayers.length > 0) {
      throw bad('model config: slidingWindowLayers needs a slidingWindow');
    }
    let prev = -1;
    for (const l of c.slidingWindowLayers) {
      if (!(Number.isInteger(l) && l > prev && l < c.numLayers)) {
        throw bad(
          `model config: slidingWindowLayers must be ascending layer indices below ${c.numLayers}`,
          { slidingWindowLayers: c.slidingWindowLayers },
        );
      }
      prev = l;
    }
  }
}

/**
 * Gemma 3's fields from a `gemma3` GGUF's metadata, as llama.cpp's loader reads them:
 * `attention.sliding_window` (absent or 0: no sliding layers), `attention.sliding_window_pattern`
 * (a per-layer list of booleans, or the interleaving, default 6), `rope.freq_base_swa`
 * (default 10,000), `final_logit_softcapping`, and the attention scale llama.cpp derives.
 * `meta(key)` reads `gemma3.<key>`.
 *
 * @throws {@link ModelError} `INVALID_CONFIG` for a malformed pattern.
 */
export function gemma3FromGguf(
  meta: (key: string) => unknown,
  shape: Pick<GemmaConfigFields, 'numLayers' | 'hiddenSize' | 'numHeads' | 'headDim'>,
): GemmaExtras & { slidingWindow: number | null } {
  const window = meta('attention.sliding_window');
  const cap = meta('final_logit_softcapping');
  const base = {
    embeddingScale: Math.sqrt(shape.hiddenSize),
    mlpActivation: 'gelu-tanh' as const,
    sandwichNorms: true,
    qkNorm: true,
    attentionScale: gemma3GgufAttentionScale(shape),
    ...(typeof cap === 'number' && cap > 0 ? { finalLogitSoftcap: cap } : {}),
  };
  if (typeof window !== 'number' || window <= 0) return { ...base, slidingWindow: null };
  const pattern = meta('attention.sliding_window_pattern');
  let sliding: number[];
  if (Array.isArray(pattern)) {
    if (pattern.length !== shape.numLayers || !pattern.every((p) => typeof p === 'boolean')) {
      throw bad(
        `gemma3.attention.sliding_window_pattern must hold one boolean per layer (${shape.numLayers})`,
      );
    }
    sliding = pattern.flatMap((p, l) => (p ? [l] : []));
  } else if (pattern === undefined) {
    sliding = slidingPatternLayers(shape.numLayers);
  } else if (typeof pattern === 'number' && Number.isInteger(pattern) && pattern >= 0) {
    sliding = slidingPatternLayers(shape.numLayers, pattern);
  } else {
    throw bad('gemma3.attention.sliding_window_pattern must be an integer or a list of booleans');
  }
  const local = meta('rope.freq_base_swa');
  return {
    ...base,
    slidingWindow: window,
    slidingWindowLayers: sliding,
    localRopeTheta: typeof local === 'number' ? local : GEMMA3_LOCAL_ROPE_THETA,
  };
}
