// Test-only: a plain dense transformer forward (a mixture of experts token by token) over a whole sequence, with no paging, no KV
// cache, no packed weights and no shared code with the engine's kernels: the independent
// "full recompute" the paged forward is checked against.

import { ropeInvFrequencies } from '@kvasir/attention-kernels';
import { ropeConfig } from '../config.js';
import type { CheckpointReader } from '../formats/checkpoint-reader.js';

/** Logits `[tokens.length][vocab]` of a causal forward over `tokens` from position 0. */
export async function naiveForward(
  reader: CheckpointReader,
  tokens: readonly number[],
): Promise<Float32Array> {
  const c = reader.config;
  const t = tokens.length;
  const hs = c.hiddenSize;
  const d = c.headDim;
  const get = (n: string) => reader.readTensorF32(n);
  // Gemma 3 as transformers writes it: norms multiply by 1 + w (in a GGUF, w already holds
  // the 1), GELU-tanh, sandwich norms, scaled embeddings, its own query scale, and local layers
  // with a window and a RoPE base of their own.
  const gemma = c.architecture === 'gemma3';
  const normAdd = gemma && reader.format === 'safetensors' ? 1 : 0;
  const getNorm = async (n: string) => (await get(n)).map((v) => v + normAdd);
  const sliding = new Set(c.slidingWindowLayers ?? []);
  const linear = (
    x: Float64Array,
    rows: number,
    w: Float32Array,
    out: number,
    inn: number,
    b?: Float32Array,
  ) => {
    const y = new Float64Array(rows * out);
    for (let r = 0; r < rows; r++)
      for (let o = 0; o < out; o++) {
        let s = b ? (b[o] as number) : 0;
        for (let i = 0; i < inn; i++) s += (x[r * inn + i] as number) * (w[o * inn + i] as number);
        y[r * out + o] = s;
      }
    return y;
  };
  const norm = (x: Float64Array, w: Float32Array) => {
    const y = new Float64Array(x.length);
    for (let r = 0; r < x.length / hs; r++) {
      let ss = 0;
      for (let i = 0; i < hs; i++) ss += (x[r * hs + i] as number) ** 2;
      const inv = 1 / Math.sqrt(ss / hs + c.rmsNormEps);
      for (let i = 0; i < hs; i++)
        y[r * hs + i] = (x[r * hs + i] as number) * inv * (w[i] as number);
    }
    return y;
  };
  // Qwen3's Q/K norm: RMSNorm of each head's d values.
  const headNorm = (x: Float64Array, w: Float32Array) => {
    for (let r = 0; r < x.length / d; r++) {
      let ss = 0;
      for (let i = 0; i < d; i++) ss += (x[r * d + i] as number) ** 2;
      const inv = 1 / Math.sqrt(ss / d + c.rmsNormEps);
      for (let i = 0; i < d; i++) x[r * d + i] = (x[r * d + i] as number) * inv * (w[i] as number);
    }
  };
  const globalInv = ropeInvFrequencies(ropeConfig(c, 1));
  const localInv =
    c.localRopeTheta !== undefined
      ? ropeInvFrequencies(ropeConfig({ ...c, ropeTheta: c.localRopeTheta, ropeScaling: null }, 1))
      : globalInv;
  // Rotate-half over the first `rot` dims (partial rotary), cos and sin times LongRoPE's
  // attention factor on Q and K alike, as llama.cpp and transformers apply it.
  const rot = c.rotaryDim ?? d;
  const m = c.ropeAttentionFactor ?? 1;
  const rope = (x: Float64Array, heads: number, inv: Float64Array | Float32Array) => {
    for (let p = 0; p < t; p++)
      for (let h = 0; h < heads; h++)
        for (let i = 0; i < rot / 2; i++) {
          const a = p * (inv[i] as number);
          const o = (p * heads + h) * d;
          const x0 = x[o + i] as number;
          const x1 = x[o + i + rot / 2] as number;
          x[o + i] = (x0 * Math.cos(a) - x1 * Math.sin(a)) * m;
          x[o + i + rot / 2] = (x1 * Math.cos(a) + x0 * Math.sin(a)) * m;
        }
  };
  const emb = await get('model.embed_tokens.weight');
  let x = new Float64Array(t * hs);
  const embScale = gemma ? Math.sqrt(hs) : 1;
  for (let p = 0; p < t; p++)
    for (let i = 0; i < hs; i++)
      x[p * hs + i] = (emb[(tokens[p] as number) * hs + i] as number) * embScale;
  const opt = async (n: string) => (reader.tensors.has(n) ? get(n) : undefined);
  for (let l = 0; l < c.numLayers; l++) {
    const p = `model.layers.${l}.`;
    const xn = norm(x, await getNorm(`${p}input_layernorm.weight`));
    const qd = c.numHeads * d;
    const kd = c.numKvHeads * d;
    const q = linear(
      xn,
      t,
      await get(`${p}self_attn.q_proj.weight`),
      qd,
      hs,
      await opt(`${p}self_attn.q_proj.bias`),
    );
    const k = linear(
      xn,
      t,
      await get(`${p}self_attn.k_proj.weight`),
      kd,
      hs,
      await opt(`${p}self_attn.k_proj.bias`),
    );
    const v = linear(
      xn,
      t,
      await get(`${p}self_attn.v_proj.weight`),
      kd,
      hs,
      await opt(`${p}self_attn.v_proj.bias`),
    );
    if (c.qkNorm) {
      headNorm(q, await getNorm(`${p}self_attn.q_norm.weight`));
      headNorm(k, await getNorm(`${p}self_attn.k_norm.weight`));
    }
    const local = sliding.has(l);
    if (!c.noRopeLayers?.includes(l)) {
      rope(q, c.numHeads, local ? localInv : globalInv);
      rope(k, c.numKvHeads, local ? localInv : globalInv);
    }
    const scale = c.attentionScale ?? 1 / Math.sqrt(d);
    // A local layer's query at i sees keys i - window + 1 .. i.
    const first = (i: number) =>
      local && c.slidingWindow !== null ? Math.max(0, i - c.slidingWindow + 1) : 0;
    const att = new Float64Array(t * qd);
    const group = c.numHeads / c.numKvHeads;
    for (let i = 0; i < t; i++)
      for (let h = 0; h < c.numHeads; h++) {
        const kh = Math.floor(h / group);
        const sc = new Float64Array(i + 1);
        let mx = Number.NEGATIVE_INFINITY;
        for (let j = first(i); j <= i; j++) {
          let s = 0;
          for (let e = 0; e < d; e++)
            s += (q[i * qd + h * d + e] as number) * (k[j * kd + kh * d + e] as number);
          sc[j] = s * scale;
          mx = Math.max(mx, sc[j] as number);
        }
        let sum = 0;
        for (let j = first(i); j <= i; j++) {
          sc[j] = Math.exp((sc[j] as number) - mx);
          sum += sc[j] as number;
        }
        for (let j = first(i); j <= i; j++)
          for (let e = 0; e < d; e++)
            att[i * qd + h * d + e] =
              (att[i * qd + h * d + e] as number) +
              ((sc[j] as number) / sum) * (v[j * kd + kh * d + e] as number);
      }
    const o = linear(
      att,
      t,
      await get(`${p}self_attn.o_proj.weight`),
      hs,
      qd,
      await opt(`${p}self_attn.o_proj.bias`),
    );
    const oNormed = gemma ? norm(o, await getNorm(`${p}post_attention_layernorm.weight`)) : o;
    for (let i = 0; i < x.length; i++) x[i] = (x[i] as number) + (oNormed[i] as number);
    const xn2 = norm(
      x,
      await getNorm(
        `${p}${gemma ? 'pre_feedforward_layernorm' : 'post_attention_layernorm'}.weight`,
      ),
    );
    if (c.moe) {
      // Every token through its top-k experts one at a time, in f64.
      const m = c.moe;
      const ff = m.expertIntermediateSize;
      const logits = linear(xn2, t, await get(`${p}mlp.gate.weight`), m.numExperts, hs);
      for (let i = 0; i < t; i++) {
        const row = Array.from(logits.subarray(i * m.numExperts, (i + 1) * m.numExperts));
        const mx = Math.max(...row);
        const ex = row.map((v) => Math.exp(v - mx));
        const total = ex.reduce((a, b) => a + b, 0);
        const top = ex
          .map((v, e) => [v / total, e] as const)
          .sort((a, b) => b[0] - a[0] || a[1] - b[1])
          .slice(0, m.numExpertsPerToken);
        const picked = top.reduce((a, [pr]) => a + pr, 0);
        const xi = xn2.slice(i * hs, (i + 1) * hs);
        for (const [pr, e] of top) {
          const wgt = m.normTopkProb ? pr / picked : pr;
          const ep = `${p}mlp.experts.${e}.`;
          const g = linear(xi, 1, await get(`${ep}gate_proj.weight`), ff, hs);
          const u = linear(xi, 1, await get(`${ep}up_proj.weight`), ff, hs);
          for (let j = 0; j < ff; j++) {
            const gv = g[j] as number;
            g[j] = (gv / (1 + Math.exp(-gv))) * (u[j] as number);
          }
          const dn = linear(g, 1, await get(`${ep}down_proj.weight`), hs, ff);
          for (let j = 0; j < hs; j++)
            x[i * hs + j] = (x[i * hs + j] as number) + wgt * (dn[j] as number);
        }
      }
      continue;
    }
    const im = c.intermediateSize;
    const g = linear(xn2, t, await get(`${p}mlp.gate_proj.weight`), im, hs);
    const u = linear(xn2, t, await get(`${p}mlp.up_proj.weight`), im, hs);
    for (let i = 0; i < g.length; i++) {
      const gv = g[i] as number;
      const act = gemma
        ? 0.5 * gv * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (gv + 0.044715 * gv ** 3)))
        : gv / (1 + Math.exp(-gv));
      g[i] = act * (u[i] as number);
    }
    const down = linear(g, t, await get(`${p}mlp.down_proj.weight`), hs, im);
    const dn = gemma ? norm(down, await getNorm(`${p}post_feedforward_layernorm.weight`)) : down;
    x = x.map((val, i) => val + (dn[i] as number));
  }
  const fin = norm(x, await getNorm('model.norm.weight'));
  const head = c.tieWordEmbeddings ? emb : await get('lm_head.weight');
  const logits = linear(fin, t, head, c.vocabSize, hs);
  const cap = c.finalLogitSoftcap;
  if (cap !== undefined)
    for (let i = 0; i < logits.length; i++)
      logits[i] = Math.tanh((logits[i] as number) / cap) * cap;
  return Float32Array.from(logits);
}

/** KL(p ‖ q) of the softmaxes of two logit rows. */
export function klDivergence(p: Float32Array, q: Float32Array): number {
  const soft = (x: Float32Array) => {
    let m = Number.NEGATIVE_INFINITY;
    for (const v of x) m = Math.max(m, v);
    let s = 0;
    const e = Array.from(x, (v) => {
      const r = Math.exp(v - m);
      s += r;
      return r;
    });
    return e.map((v) => v / s);
  };
  const a = soft(p);
  const b = soft(q);
  let kl = 0;
  for (let i = 0; i < a.length; i++)
    if ((a[i] as number) > 0)
      kl += (a[i] as number) * Math.log((a[i] as number) / (b[i] as number));
  return kl;
}
