// CPU reference twins of the dense WGSL kernels. Same inputs, same packed weight words, same
// epilogues; they define what the GPU kernels must compute and run the CPU backend.
import {
  ggmlRowDot,
  isGgmlWeight,
  type StoredWeight,
  unpackRow,
  weightBytesView,
} from './weight-format.js';

/** What a matmul does with each result `v = Σ_k x[m][k]·W[n][k]`. */
export type MatmulEpilogue =
  /** `y[m][n] = v (+ bias[n])` */
  | 'store'
  /** `y[m][n] += v (+ bias[n])`: the residual add fused into the projection. */
  | 'residual'
  /**
   * Weight rows interleaved gate/up (row 2j = gate_j, row 2j+1 = up_j):
   * `y[m][j] = silu(v[2j]) · v[2j+1]`, so `y` has `rows / 2` columns.
   */
  | 'swiglu'
  /** As `'swiglu'` with GELU (tanh approximation) for SiLU: `y[m][j] = gelu(v[2j]) · v[2j+1]`. */
  | 'geglu'
  /**
   * gpt-oss's clamped SwiGLU on interleaved rows: with `g = min(v[2j], 7)`,
   * `y[m][j] = g · σ(1.702 · g) · (clamp(v[2j+1], −7, 7) + 1)`.
   */
  | 'swiglu-oai';

/** SiLU as the kernels compute it. */
export function silu(x: number): number {
  return x / (1 + Math.exp(-x));
}

/** GELU with the tanh approximation (`gelu_pytorch_tanh`), as the kernels compute it. */
export function geluTanh(x: number): number {
  return 0.5 * x * (1 + Math.tanh(0.7978845608028654 * x * (1 + 0.044715 * x * x)));
}

/** gpt-oss's clamped SwiGLU of a gate and an up value (ggml's `swiglu_oai`, alpha 1.702, limit 7). */
export function swigluOai(gate: number, up: number): number {
  const x = Math.min(gate, 7);
  const y = Math.min(Math.max(up, -7), 7);
  return (x / (1 + Math.exp(-1.702 * x))) * (y + 1);
}

/** The combination of gate and up values of a gated epilogue. */
const gateAct = (epilogue: MatmulEpilogue): ((g: number, u: number) => number) =>
  epilogue === 'geglu'
    ? (g, u) => geluTanh(g) * u
    : epilogue === 'swiglu-oai'
      ? swigluOai
      : (g, u) => silu(g) * u;

/** Whether an epilogue pairs gate and up rows (its output has half the rows' columns). */
const gated = (epilogue: MatmulEpilogue) =>
  epilogue === 'swiglu' || epilogue === 'geglu' || epilogue === 'swiglu-oai';

/**
 * `y = x · Wᵀ` for `x` of `m` rows, with an optional bias and a fused epilogue.
 * `out` is required for `'residual'` (it holds the residual and is updated in place).
 */
export function matmulRef(
  x: Float32Array,
  m: number,
  w: StoredWeight,
  options: { bias?: Float32Array; epilogue?: MatmulEpilogue; out?: Float32Array } = {},
): Float32Array {
  const { rows: n, cols: k } = w;
  const epilogue = options.epilogue ?? 'store';
  const outCols = gated(epilogue) ? n / 2 : n;
  const act = gateAct(epilogue);
  const y = options.out ?? new Float32Array(m * outCols);
  const bias = options.bias;
  if (isGgmlWeight(w)) {
    // Straight from the blocks, one block decoded at a time: no row (let alone matrix) of
    // f32 weights is materialized. Same products, same order as the dense path below.
    const g = w;
    const bytes = weightBytesView(g);
    const dot = (j: number, i: number) => {
      const v = ggmlRowDot(g, bytes, j, x, i * k);
      return bias ? v + (bias[j] as number) : v;
    };
    for (let i = 0; i < m; i++) {
      for (let j = 0; j < n; j += gated(epilogue) ? 2 : 1) {
        if (gated(epilogue)) y[i * outCols + j / 2] = act(dot(j, i), dot(j + 1, i));
        else if (epilogue === 'residual')
          y[i * outCols + j] = (y[i * outCols + j] as number) + dot(j, i);
        else y[i * outCols + j] = dot(j, i);
      }
    }
    return y;
  }
  const row = new Float32Array(k);
  const row2 = new Float32Array(k);
  const step = gated(epilogue) ? 2 : 1;
  for (let j = 0; j < n; j += step) {
    unpackRow(w, j, row);
    if (step === 2) unpackRow(w, j + 1, row2);
    for (let i = 0; i < m; i++) {
      const xo = i * k;
      let acc = 0;
      let acc2 = 0;
      for (let t = 0; t < k; t++) acc += (x[xo + t] as number) * (row[t] as number);
      if (bias) acc += bias[j] as number;
      if (step === 2) {
        for (let t = 0; t < k; t++) acc2 += (x[xo + t] as number) * (row2[t] as number);
        if (bias) acc2 += bias[j + 1] as number;
        y[i * outCols + j / 2] = act(acc, acc2);
      } else if (epilogue === 'residual') {
        y[i * outCols + j] = (y[i * outCols + j] as number) + acc;
      } else {
        y[i * outCols + j] = acc;
      }
    }
  }
  return y;
}

/**
 * RMSNorm of `m` rows of width `h`: `y = x / sqrt(mean(x²) + eps) · weight`.
 * With `rowIndex`, output row i normalizes input row `rowIndex[i]` (gathering only the rows
 * whose logits are needed).
 */
export function rmsNormRef(
  x: Float32Array,
  m: number,
  h: number,
  weight: Float32Array,
  eps: number,
  rowIndex?: Int32Array,
  out?: Float32Array,
): Float32Array {
  const y = out ?? new Float32Array(m * h);
  for (let i = 0; i < m; i++) {
    const src = (rowIndex ? (rowIndex[i] as number) : i) * h;
    let ss = 0;
    for (let t = 0; t < h; t++) {
      const v = x[src + t] as number;
      ss += v * v;
    }
    const inv = 1 / Math.sqrt(ss / h + eps);
    for (let t = 0; t < h; t++) y[i * h + t] = (x[src + t] as number) * inv * (weight[t] as number);
  }
  return y;
}

/** `y = silu(gate) · up`, element-wise. */
export function swigluRef(gate: Float32Array, up: Float32Array, out?: Float32Array): Float32Array {
  const y = out ?? new Float32Array(gate.length);
  for (let i = 0; i < gate.length; i++) y[i] = silu(gate[i] as number) * (up[i] as number);
  return y;
}

/** Gathers embedding rows: `y[t] = table[ids[t]]`, decoded from the packed table. */
export function embeddingRef(
  ids: Int32Array,
  table: StoredWeight,
  out?: Float32Array,
): Float32Array {
  const h = table.cols;
  const y = out ?? new Float32Array(ids.length * h);
  const row = new Float32Array(h);
  for (let t = 0; t < ids.length; t++) y.set(unpackRow(table, ids[t] as number, row), t * h);
  return y;
}

/** `a += b` element-wise (residual add). Returns `a`. */
export function addRef(a: Float32Array, b: Float32Array): Float32Array {
  for (let i = 0; i < a.length; i++) a[i] = (a[i] as number) + (b[i] as number);
  return a;
}

/** Adds `bias` (length `n`) to every row of `x` (`m` rows of `n`). Returns `x`. */
export function biasAddRef(
  x: Float32Array,
  m: number,
  n: number,
  bias: Float32Array,
): Float32Array {
  for (let i = 0; i < m; i++)
    for (let j = 0; j < n; j++) x[i * n + j] = (x[i * n + j] as number) + (bias[j] as number);
  return x;
}

/** A final logit soft cap in place: `l = tanh(l / cap) · cap`. */
export function softcapLogits(logits: Float32Array, cap: number): void {
  for (let i = 0; i < logits.length; i++) logits[i] = Math.tanh((logits[i] as number) / cap) * cap;
}
