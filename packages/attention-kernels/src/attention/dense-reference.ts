/**
 * Arguments of {@link denseAttention}: plain dense row-major arrays, no cache, no paging.
 */
export interface DenseAttentionArgs {
  /** Queries, `[numQueries][numQHeads][headDim]`. */
  readonly q: Float32Array;
  /** Keys, `[numKeys][numKvHeads][headDim]`. */
  readonly k: Float32Array;
  /** Values, `[numKeys][numKvHeads][headDim]`. */
  readonly v: Float32Array;
  readonly numQueries: number;
  readonly numKeys: number;
  readonly numQHeads: number;
  readonly numKvHeads: number;
  readonly headDim: number;
  /** Multiplier of `q·k`; default `1 / sqrt(headDim)`. */
  readonly scale?: number;
  /** When set, scores become `tanh(s / softCap) * softCap` (after scaling). */
  readonly softCap?: number;
  /**
   * Causal masking. The queries are the LAST `numQueries` positions of the `numKeys` keys, so
   * query `i` sees keys `0 .. numKeys - numQueries + i`. Default true.
   */
  readonly causal?: boolean;
  /** Causal sliding window: query `i` sees only the last `window` of its keys. */
  readonly window?: number;
}

/**
 * Naive dense attention, `softmax(Q Kᵀ · scale) V`, written as plainly as possible in f64 so that
 * it can serve as the ground truth of the paged references. Query head `h` reads KV head
 * `floor(h / (numQHeads / numKvHeads))`.
 *
 * Quadratic in memory per query row; meant for tests, not for serving.
 *
 * @returns the output, `[numQueries][numQHeads][headDim]`.
 */
export function denseAttention(args: DenseAttentionArgs): Float32Array {
  const { q, k, v, numQueries, numKeys, numQHeads, numKvHeads, headDim } = args;
  const scale = args.scale ?? 1 / Math.sqrt(headDim);
  const causal = args.causal ?? true;
  const group = numQHeads / numKvHeads;
  const out = new Float32Array(numQueries * numQHeads * headDim);

  for (let i = 0; i < numQueries; i++) {
    const lastKey = causal ? numKeys - numQueries + i : numKeys - 1;
    const firstKey = args.window === undefined ? 0 : Math.max(0, lastKey - args.window + 1);
    for (let h = 0; h < numQHeads; h++) {
      const kvh = Math.floor(h / group);
      const scores: number[] = [];
      for (let j = firstKey; j <= lastKey; j++) {
        let dot = 0;
        for (let d = 0; d < headDim; d++) {
          dot += q[(i * numQHeads + h) * headDim + d]! * k[(j * numKvHeads + kvh) * headDim + d]!;
        }
        let s = dot * scale;
        if (args.softCap !== undefined) s = Math.tanh(s / args.softCap) * args.softCap;
        scores.push(s);
      }
      if (scores.length === 0) continue;
      const max = Math.max(...scores);
      const weights = scores.map((s) => Math.exp(s - max));
      const total = weights.reduce((a, b) => a + b, 0);
      for (let d = 0; d < headDim; d++) {
        let acc = 0;
        for (let j = firstKey; j <= lastKey; j++) {
          acc += weights[j - firstKey]! * v[(j * numKvHeads + kvh) * headDim + d]!;
        }
        out[(i * numQHeads + h) * headDim + d] = acc / total;
      }
    }
  }
  return out;
}
