// Phi-3.5 / Phi-4-mini (HF `Phi3ForCausalLM`, GGUF `phi3`) in ModelConfig's terms: partial
// rotary (only the first `rotaryDim` dims of a head rotate) and LongRoPE (per-pair factors, long
// or short by the context, and an attention factor on the rotated dims), read from config.json
// and GGUF metadata as transformers and llama.cpp read them. Its fused QKV and gate/up tensors
// are split by the readers (see `fusedSlices`).
// config.ts imports this file: it takes configs by their fields' shape, not by ModelConfig.
import { ModelError } from '../errors.js';

/** LongRoPE as {@link Phi3ConfigFields.ropeScaling} holds it. */
export interface LongRopeScaling {
  readonly type: 'longrope';
  readonly shortFactors: readonly number[];
  readonly longFactors: readonly number[];
  readonly originalMaxPositionEmbeddings: number;
}

/** The fields of a model config Phi-3 reads or sets (ModelConfig's, by shape). */
export interface Phi3ConfigFields {
  readonly architecture: string;
  readonly headDim: number;
  readonly numHeads: number;
  readonly numKvHeads: number;
  readonly intermediateSize: number;
  readonly maxPositionEmbeddings: number;
  readonly ropeScaling: { readonly type: string } | null;
  readonly rotaryDim?: number;
  readonly ropeAttentionFactor?: number;
}

function bad(message: string, details?: Record<string, unknown>): ModelError {
  return new ModelError('INVALID_CONFIG', message, details ? { details } : undefined);
}

function factorList(v: unknown, key: string, pairs: number): number[] {
  if (
    !Array.isArray(v) ||
    v.length !== pairs ||
    !v.every((f) => typeof f === 'number' && Number.isFinite(f) && f > 0)
  ) {
    throw bad(
      `config.json: rope_scaling "${key}" must list ${pairs} positive numbers (rotary dim / 2)`,
      { key },
    );
  }
  return v as number[];
}

/**
 * LongRoPE's attention factor as transformers computes it (`_compute_longrope_parameters`) and
 * llama.cpp's converter writes it: `sqrt(1 + ln(s) / ln(original))` for an extension
 * `s = max / original` above 1, else 1.
 */
export function longRopeAttentionFactor(maxPositions: number, original: number): number {
  const s = maxPositions / original;
  return s > 1 ? Math.sqrt(1 + Math.log(s) / Math.log(original)) : 1;
}

/**
 * Phi-3's fields from `config.json`: `partial_rotary_factor` (rotary dim
 * `floor(headDim · factor)`), and `rope_scaling` of type `longrope` (or its old name `su`) with
 * `long_factor` / `short_factor` over `original_max_position_embeddings` (top level or in
 * `rope_scaling`), its `attention_factor` or the derived one.
 *
 * @throws {@link ModelError} `INVALID_CONFIG` for malformed fields, `UNSUPPORTED_ARCHITECTURE`
 *   for another RoPE scaling type.
 */
export function phi3FromHf(
  c: Record<string, unknown>,
  headDim: number,
  maxPositionEmbeddings: number,
): {
  rotaryDim?: number;
  ropeScaling?: LongRopeScaling | null;
  ropeAttentionFactor?: number;
} {
  const out: {
    rotaryDim?: number;
    ropeScaling?: LongRopeScaling | null;
    ropeAttentionFactor?: number;
  } = {};
  const partial = c.partial_rotary_factor;
  let rot = headDim;
  if (partial !== undefined && partial !== null) {
    if (typeof partial !== 'number' || !(partial > 0 && partial <= 1)) {
      throw bad('config.json: "partial_rotary_factor" must be a number in (0, 1]', {
        key: 'partial_rotary_factor',
      });
    }
    rot = Math.floor(headDim * partial);
    if (rot !== headDim) out.rotaryDim = rot;
  }
  const r = c.rope_scaling;
  if (r === undefined || r === null) return out;
  if (typeof r !== 'object' || Array.isArray(r))
    throw bad('config.json: "rope_scaling" must be an object');
  const rs = r as Record<string, unknown>;
  const kind = rs.rope_type ?? rs.type;
  if (kind === 'default') return { ...out, ropeScaling: null };
  if (kind !== 'longrope' && kind !== 'su') {
    throw new ModelError(
      'UNSUPPORTED_ARCHITECTURE',
      `config.json: Phi-3 rope_scaling type ${JSON.stringify(kind)} is not supported (only longrope)`,
      { details: { key: 'rope_scaling' } },
    );
  }
  const original = c.original_max_position_embeddings ?? rs.original_max_position_embeddings;
  if (typeof original !== 'number' || !Number.isInteger(original) || original <= 1) {
    throw bad(
      'config.json: LongRoPE needs "original_max_position_embeddings" (an integer above 1)',
      {
        key: 'original_max_position_embeddings',
      },
    );
  }
  const given = rs.attention_factor;
  if (given !== undefined && given !== null && !(typeof given === 'number' && given > 0)) {
    throw bad('config.json: rope_scaling "attention_factor" must be a positive number', {
      key: 'attention_factor',
    });
  }
  const factor =
    typeof given === 'number' ? given : longRopeAttentionFactor(maxPositionEmbeddings, original);
  return {
    ...out,
    ropeScaling: {
      type: 'longrope',
      shortFactors: factorList(rs.short_factor, 'short_factor', rot / 2),
      longFactors: factorList(rs.long_factor, 'long_factor', rot / 2),
      originalMaxPositionEmbeddings: original,
    },
    ...(factor !== 1 ? { ropeAttentionFactor: factor } : {}),
  };
}

/** Writes a Phi-3 config's own fields into a `config.json` object (see {@link phi3FromHf}). */
export function phi3ToHf(c: Phi3ConfigFields, out: Record<string, unknown>): void {
  out.partial_rotary_factor = (c.rotaryDim ?? c.headDim) / c.headDim;
  const s = c.ropeScaling as LongRopeScaling | null;
  if (s?.type !== 'longrope') return;
  out.original_max_position_embeddings = s.originalMaxPositionEmbeddings;
  out.rope_scaling = {
    type: 'longrope',
    long_factor: [...s.longFactors],
    short_factor: [...s.shortFactors],
    attention_factor: c.ropeAttentionFactor ?? 1,
  };
}

/**
 * Checks the partial-rotary and LongRoPE fields of any config (only `phi3` sets them):
 * `rotaryDim` even in (0, headDim], LongRoPE's lists of `rotaryDim / 2` finite positive
 * factors, a finite positive attention factor.
 *
 * @throws {@link ModelError} `INVALID_CONFIG` naming the first violated rule.
 */
export function validatePhi3Fields(c: Phi3ConfigFields): void {
  const rot = c.rotaryDim ?? c.headDim;
  if (!Number.isInteger(rot) || rot <= 0 || rot % 2 !== 0 || rot > c.headDim) {
    throw bad(`model config: rotaryDim must be even and in (0, headDim=${c.headDim}], got ${rot}`, {
      key: 'rotaryDim',
    });
  }
  const m = c.ropeAttentionFactor;
  if (m !== undefined && !(m > 0 && Number.isFinite(m))) {
    throw bad(`model config: ropeAttentionFactor must be finite and positive, got ${m}`, {
      key: 'ropeAttentionFactor',
    });
  }
  const s = c.ropeScaling as LongRopeScaling | null;
  if (s?.type !== 'longrope') return;
  for (const [key, list] of [
    ['shortFactors', s.shortFactors],
    ['longFactors', s.longFactors],
  ] as const) {
    if (
      !Array.isArray(list) ||
      list.length !== rot / 2 ||
      !list.every((f) => typeof f === 'number' && f > 0 && Number.isFinite(f))
    ) {
      throw bad(
        `model config: LongRoPE ${key} must be ${rot / 2} finite positive factors (rotaryDim / 2)`,
        { key },
      );
    }
  }
  const o = s.originalMaxPositionEmbeddings;
  if (!Number.isInteger(o) || o <= 0) {
    throw bad(`model config: LongRoPE originalMaxPositionEmbeddings must be a positive integer`);
  }
}

/**
 * The per-pair divisors LongRoPE uses for a model run with `maxPositionEmbeddings` positions:
 * the long factors past the original context, the short ones within it (llama.cpp's
 * `get_rope_factors`: `n_ctx_seq > n_ctx_orig_yarn`).
 */
export function longRopeFactors(
  s: LongRopeScaling,
  maxPositionEmbeddings: number,
): readonly number[] {
  return maxPositionEmbeddings > s.originalMaxPositionEmbeddings ? s.longFactors : s.shortFactors;
}

/**
 * The GGUF (llama.cpp) fused tensors of a Phi-3 layer and the HF rows they hold, in order:
 * `attn_qkv` is Q, K and V stacked; `ffn_up` is the gate then the up projection (llama.cpp's
 * SwiGLU takes the first half as the gate). Each part is `[rows, hidden]`.
 */
export function phi3FusedParts(
  c: Phi3ConfigFields,
): Readonly<Record<string, readonly { readonly proj: string; readonly rows: number }[]>> {
  const q = c.numHeads * c.headDim;
  const kv = c.numKvHeads * c.headDim;
  return {
    attn_qkv: [
      { proj: 'self_attn.q_proj', rows: q },
      { proj: 'self_attn.k_proj', rows: kv },
      { proj: 'self_attn.v_proj', rows: kv },
    ],
    ffn_up: [
      { proj: 'mlp.gate_proj', rows: c.intermediateSize },
      { proj: 'mlp.up_proj', rows: c.intermediateSize },
    ],
  };
}

/**
 * LongRoPE from a `phi3` GGUF as llama.cpp loads it: the factors of the `rope_factors_long` and
 * `rope_factors_short` tensors (passed in; one absent is all ones, as llama.cpp then rotates
 * without factors), over `rope.scaling.original_context_length` (default: the context length),
 * and `rope.scaling.attn_factor` (default 1), which llama.cpp applies with or without factors.
 *
 * @param get - the file's `phi3.<key>` metadata.
 * @throws {@link ModelError} `INVALID_CONFIG` for a factor tensor of the wrong length or a
 *   non-positive value.
 */
export function phi3RopeFromGguf(
  get: (key: string) => unknown,
  file: string,
  rotaryDim: number,
  contextLength: number,
  tensors: { readonly long?: Float32Array; readonly short?: Float32Array } | undefined,
): { ropeScaling?: LongRopeScaling; ropeAttentionFactor?: number } {
  const num = (key: string, fallback: number): number => {
    const v = get(key);
    if (v === undefined) return fallback;
    if (typeof v !== 'number' || !(v > 0) || !Number.isFinite(v)) {
      throw bad(`${file}: GGUF metadata "phi3.${key}" must be a positive number`, {
        key: `phi3.${key}`,
      });
    }
    return v;
  };
  const m = num('rope.scaling.attn_factor', 1);
  const out: { ropeScaling?: LongRopeScaling; ropeAttentionFactor?: number } =
    m !== 1 ? { ropeAttentionFactor: m } : {};
  if (!tensors?.long && !tensors?.short) return out;
  const list = (t: Float32Array | undefined, name: string): number[] => {
    if (t === undefined) return Array(rotaryDim / 2).fill(1);
    if (t.length !== rotaryDim / 2) {
      throw bad(
        `${file}: tensor "${name}" has ${t.length} factors; the rotary dim (${rotaryDim}) has ${rotaryDim / 2} pairs`,
        { tensor: name },
      );
    }
    return Array.from(t);
  };
  return {
    ...out,
    ropeScaling: {
      type: 'longrope',
      shortFactors: list(tensors.short, 'rope_factors_short.weight'),
      longFactors: list(tensors.long, 'rope_factors_long.weight'),
      originalMaxPositionEmbeddings: num('rope.scaling.original_context_length', contextLength),
    },
  };
}
