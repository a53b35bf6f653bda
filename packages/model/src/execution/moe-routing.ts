import type { MoeConfig } from '../config.js';

/**
 * Where a step's tokens go in one mixture-of-experts layer, grouped by expert so that each
 * expert multiplies only its own tokens' rows, once, as one batch.
 *
 * Grouped row `r` (in `[0, tokens · k)`) is token `tokenOf[r]`'s input to expert `e` for
 * `offsets[e] <= r < offsets[e + 1]`; within an expert, tokens ascend. Token `i`'s `j`-th choice
 * (by descending probability) is grouped row `rowOf[i·k + j]`, weighted by `weights[i·k + j]`.
 */
export interface ExpertRouting {
  readonly tokens: number;
  /** Experts per token. */
  readonly k: number;
  /** `numExperts + 1` starts of each expert's rows. */
  readonly offsets: Int32Array;
  readonly tokenOf: Int32Array;
  readonly rowOf: Int32Array;
  readonly weights: Float32Array;
}

/**
 * Routes `tokens` rows of router logits (`[tokens][numExperts]`): a softmax over the experts
 * (f64), the `numExpertsPerToken` most probable (ties to the lower index), their probabilities
 * renormalized to sum to 1 when `normTopkProb` (as llama.cpp's `qwen3moe` always does, its sum
 * clamped below at 2^-14), then grouped by expert.
 */
export function routeExperts(logits: Float32Array, tokens: number, moe: MoeConfig): ExpertRouting {
  const n = moe.numExperts;
  const k = moe.numExpertsPerToken;
  const chosen = new Int32Array(tokens * k);
  const weights = new Float32Array(tokens * k);
  const probs = new Float64Array(n);
  const counts = new Int32Array(n);
  for (let i = 0; i < tokens; i++) {
    let max = Number.NEGATIVE_INFINITY;
    for (let e = 0; e < n; e++) max = Math.max(max, logits[i * n + e] as number);
    let sum = 0;
    for (let e = 0; e < n; e++) {
      const p = Math.exp((logits[i * n + e] as number) - max);
      probs[e] = p;
      sum += p;
    }
    let picked = 0;
    for (let j = 0; j < k; j++) {
      let best = -1;
      for (let e = 0; e < n; e++) {
        if (
          (probs[e] as number) >= 0 &&
          (best < 0 || (probs[e] as number) > (probs[best] as number))
        )
          best = e;
      }
      chosen[i * k + j] = best;
      weights[i * k + j] = (probs[best] as number) / sum;
      picked += (probs[best] as number) / sum;
      // Taken: out of the next choices (probabilities are never negative).
      probs[best] = -1;
      counts[best] = (counts[best] as number) + 1;
    }
    if (moe.normTopkProb) {
      const norm = Math.max(picked, 6.103515625e-5);
      for (let j = 0; j < k; j++) weights[i * k + j] = (weights[i * k + j] as number) / norm;
    }
  }
  const offsets = new Int32Array(n + 1);
  for (let e = 0; e < n; e++) offsets[e + 1] = (offsets[e] as number) + (counts[e] as number);
  const next = offsets.slice(0, n);
  const tokenOf = new Int32Array(tokens * k);
  const rowOf = new Int32Array(tokens * k);
  for (let i = 0; i < tokens; i++) {
    for (let j = 0; j < k; j++) {
      const e = chosen[i * k + j] as number;
      const r = next[e] as number;
      next[e] = r + 1;
      tokenOf[r] = i;
      rowOf[i * k + j] = r;
    }
  }
  return { tokens, k, offsets, tokenOf, rowOf, weights };
}

/** Copies each grouped row's token input (`x`: `[tokens][width]`) into `out` (`[tokens·k][width]`). */
export function gatherExpertRows(
  r: ExpertRouting,
  x: Float32Array,
  width: number,
  out: Float32Array,
): void {
  for (let row = 0; row < r.tokenOf.length; row++) {
    const tok = r.tokenOf[row] as number;
    out.set(x.subarray(tok * width, (tok + 1) * width), row * width);
  }
}

/**
 * Adds each token's weighted expert outputs (`y`: grouped rows `[tokens·k][width]`) to its
 * residual row of `x`: the weighted sum over its choices in order first, then the residual,
 * as llama.cpp sums them.
 */
export function addExpertOutputs(
  r: ExpertRouting,
  y: Float32Array,
  width: number,
  x: Float32Array,
): void {
  const sum = new Float32Array(width);
  for (let i = 0; i < r.tokens; i++) {
    sum.fill(0);
    for (let j = 0; j < r.k; j++) {
      const row = r.rowOf[i * r.k + j] as number;
      const w = r.weights[i * r.k + j] as number;
      const off = row * width;
      for (let c = 0; c < width; c++) sum[c] = (sum[c] as number) + w * (y[off + c] as number);
    }
    const xo = i * width;
    for (let c = 0; c < width; c++) x[xo + c] = (x[xo + c] as number) + (sum[c] as number);
  }
}
