import { type Phi3ConfigFields, phi3FusedParts } from '../../families/phi3.js';

const LAYER_MAP: Record<string, string> = {
  attn_norm: 'input_layernorm',
  attn_q: 'self_attn.q_proj',
  attn_k: 'self_attn.k_proj',
  attn_v: 'self_attn.v_proj',
  attn_output: 'self_attn.o_proj',
  attn_q_norm: 'self_attn.q_norm',
  attn_k_norm: 'self_attn.k_norm',
  ffn_norm: 'post_attention_layernorm',
  ffn_gate: 'mlp.gate_proj',
  ffn_up: 'mlp.up_proj',
  ffn_down: 'mlp.down_proj',
  ffn_gate_inp: 'mlp.gate',
};
const GLOBAL_MAP: Record<string, string> = {
  token_embd: 'model.embed_tokens',
  output_norm: 'model.norm',
  output: 'lm_head',
};
const HF_LAYER_MAP = Object.fromEntries(Object.entries(LAYER_MAP).map(([k, v]) => [v, k]));
/**
 * Gemma's sandwich norms: its `ffn_norm` is the pre-MLP norm, and `post_attention_layernorm`
 * (Llama's pre-MLP norm) normalizes attention's output.
 */
const GEMMA_LAYER_MAP: Record<string, string> = {
  ...LAYER_MAP,
  ffn_norm: 'pre_feedforward_layernorm',
  post_attention_norm: 'post_attention_layernorm',
  post_ffw_norm: 'post_feedforward_layernorm',
};
const HF_GEMMA_LAYER_MAP = Object.fromEntries(
  Object.entries(GEMMA_LAYER_MAP).map(([k, v]) => [v, k]),
);
/**
 * gpt-oss's: its pre-MLP norm is `post_attention_norm` (llama.cpp's `attn_post_norm`), and each
 * layer has attention sinks (`attn_sinks`, one logit per head).
 */
const GPT_OSS_LAYER_MAP: Record<string, string> = {
  ...Object.fromEntries(Object.entries(LAYER_MAP).filter(([k]) => k !== 'ffn_norm')),
  post_attention_norm: 'post_attention_layernorm',
  attn_sinks: 'self_attn.sinks',
};
const HF_GPT_OSS_LAYER_MAP = Object.fromEntries(
  Object.entries(GPT_OSS_LAYER_MAP).map(([k, v]) => [v, k]),
);
const layerMaps = (arch: string | undefined) =>
  arch === 'gemma3'
    ? { toHf: GEMMA_LAYER_MAP, toGguf: HF_GEMMA_LAYER_MAP }
    : arch === 'gpt-oss'
      ? { toHf: GPT_OSS_LAYER_MAP, toGguf: HF_GPT_OSS_LAYER_MAP }
      : { toHf: LAYER_MAP, toGguf: HF_LAYER_MAP };
const HF_GLOBAL_MAP = Object.fromEntries(Object.entries(GLOBAL_MAP).map(([k, v]) => [v, k]));

/**
 * Canonical HF name of a GGUF tensor name, or `undefined` for tensors with no HF twin. The
 * model's architecture (default llama's names) decides the names of Gemma's norms.
 */
export function ggufToHfName(name: string, architecture?: string): string | undefined {
  const m = /^blk\.(\d+)\.([a-z_]+)\.(weight|bias)$/.exec(name);
  if (m) {
    const hf = layerMaps(architecture).toHf[m[2]!];
    return hf ? `model.layers.${m[1]}.${hf}.${m[3]}` : undefined;
  }
  const g = /^([a-z_]+)\.(weight|bias)$/.exec(name);
  if (g) {
    const hf = GLOBAL_MAP[g[1]!];
    return hf ? `${hf}.${g[2]}` : undefined;
  }
  return undefined;
}

/** GGUF name of a canonical HF tensor name (the inverse of {@link ggufToHfName}). */
export function hfToGgufName(name: string, architecture?: string): string | undefined {
  const m = /^model\.layers\.(\d+)\.(.+)\.(weight|bias)$/.exec(name);
  if (m) {
    const g = layerMaps(architecture).toGguf[m[2]!];
    return g ? `blk.${m[1]}.${g}.${m[3]}` : undefined;
  }
  const g = /^(.+)\.(weight|bias)$/.exec(name);
  if (g) {
    const gg = HF_GLOBAL_MAP[g[1]!];
    return gg ? `${gg}.${g[2]}` : undefined;
  }
  return undefined;
}

/**
 * A GGUF mixture-of-experts tensor (`blk.N.ffn_{gate,up,down}_exps.weight`: one 3-D tensor of
 * every expert's matrix, expert-major; gpt-oss's `.bias`: one 2-D tensor of every expert's bias)
 * as its layer, projection and kind, or `undefined`. Expert `e`'s slice is the HF tensor
 * `model.layers.N.mlp.experts.e.<proj>.<kind>`.
 */
export function ggufExpertTensor(name: string):
  | {
      layer: number;
      proj: 'gate_proj' | 'up_proj' | 'down_proj';
      kind: 'weight' | 'bias';
    }
  | undefined {
  const m = /^blk\.(\d+)\.ffn_(gate|up|down)_exps\.(weight|bias)$/.exec(name);
  if (!m) return undefined;
  return {
    layer: Number(m[1]),
    proj: `${m[2] as 'gate' | 'up' | 'down'}_proj`,
    kind: m[3] as 'weight' | 'bias',
  };
}

/** The HF name of expert `e`'s slice of a GGUF expert tensor (see {@link ggufExpertTensor}). */
export function hfExpertName(layer: number, e: number, proj: string, kind = 'weight'): string {
  return `model.layers.${layer}.mlp.experts.${e}.${proj}.${kind}`;
}

/** The GGUF expert tensor an HF expert tensor belongs to, with its expert index, or `undefined`. */
export function hfToGgufExpert(name: string): { gguf: string; expert: number } | undefined {
  const m = /^model\.layers\.(\d+)\.mlp\.experts\.(\d+)\.(gate|up|down)_proj\.(weight|bias)$/.exec(
    name,
  );
  if (!m) return undefined;
  return { gguf: `blk.${m[1]}.ffn_${m[3]}_exps.${m[4]}`, expert: Number(m[2]) };
}

/**
 * A Phi-3 GGUF fused tensor (`blk.N.attn_qkv.weight`, or `blk.N.ffn_up.weight`, which holds
 * gate and up) as the HF tensors it stacks, with their rows, or `undefined`.
 */
export function ggufFusedTensor(
  name: string,
  c: Phi3ConfigFields,
): { name: string; rows: number }[] | undefined {
  const m = /^blk\.(\d+)\.(attn_qkv|ffn_up)\.weight$/.exec(name);
  if (!m) return undefined;
  const parts = phi3FusedParts(c)[m[2]!] ?? [];
  return parts.map((p) => ({ name: `model.layers.${m[1]}.${p.proj}.weight`, rows: p.rows }));
}

/**
 * The Phi-3 GGUF fused tensor an HF projection is written into (`attn_qkv` for q/k/v, `ffn_up`
 * for gate/up), with the part's index, or `undefined` for another tensor.
 */
export function hfToGgufFused(name: string): { gguf: string; part: number } | undefined {
  const m = /^model\.layers\.(\d+)\.(self_attn\.[qkv]_proj|mlp\.(?:gate|up)_proj)\.weight$/.exec(
    name,
  );
  if (!m) return undefined;
  const order = ['self_attn.q_proj', 'self_attn.k_proj', 'self_attn.v_proj'];
  const part = order.indexOf(m[2]!);
  return part >= 0
    ? { gguf: `blk.${m[1]}.attn_qkv.weight`, part }
    : { gguf: `blk.${m[1]}.ffn_up.weight`, part: m[2] === 'mlp.gate_proj' ? 0 : 1 };
}
