import {
  type PagedAttentionConfig,
  pagedLayout,
  type RowReader,
  resolveScale,
  rowReaderFor,
} from './config.js';

/** One sequence's slice of a paged attention call. */
export interface PagedRows {
  readonly blockTable: Uint32Array;
  /** Cached tokens, the new query tokens included (they are the last `numTokens`). */
  readonly contextLen: number;
  /** Index of the sequence's first query token in the concatenated query/output rows. */
  readonly firstToken: number;
  readonly numTokens: number;
}

/**
 * Causal attention of `rows.numTokens` query tokens over one sequence's paged cache, writing the
 * output rows. Query token `i` sees cached tokens `0 .. contextLen - numTokens + i`.
 * Shared by the decode (one token) and prefill references; inputs must be validated.
 *
 * @internal
 */
export function attendPagedRows(
  config: PagedAttentionConfig,
  cache: Uint32Array,
  query: Float32Array,
  out: Float32Array,
  rows: PagedRows,
): void {
  const { numQHeads, numKvHeads, headDim, blockSize } = config;
  const layout = pagedLayout(config);
  const read: RowReader = rowReaderFor(layout);
  const scale = resolveScale(config);
  const softCap = config.softCap;
  const group = numQHeads / numKvHeads;
  const past = rows.contextLen - rows.numTokens;
  const numRows = rows.numTokens * group;
  const kRow = new Float32Array(headDim);
  const vRow = new Float32Array(headDim);
  // Per (token, head in group) running max, denominator and unnormalized output.
  const max = new Float64Array(numRows);
  const denom = new Float64Array(numRows);
  const acc = new Float64Array(numRows * headDim);

  for (let kvh = 0; kvh < numKvHeads; kvh++) {
    max.fill(Number.NEGATIVE_INFINITY);
    denom.fill(0);
    acc.fill(0);
    for (let j = 0; j < rows.contextLen; j++) {
      const block = rows.blockTable[Math.floor(j / blockSize)]!;
      const t = j % blockSize;
      const kSlab = block * layout.blockWords + 2 * kvh * layout.slabWords;
      read(cache, kSlab, t, kRow);
      read(cache, kSlab + layout.slabWords, t, vRow);
      // Query token i sees key j when past + i >= j.
      const firstToken = Math.max(0, j - past);
      for (let i = firstToken; i < rows.numTokens; i++) {
        for (let g = 0; g < group; g++) {
          const r = i * group + g;
          const qOff = ((rows.firstToken + i) * numQHeads + kvh * group + g) * headDim;
          let dot = 0;
          for (let d = 0; d < headDim; d++) dot += query[qOff + d]! * kRow[d]!;
          let score = dot * scale;
          if (softCap !== undefined) score = Math.tanh(score / softCap) * softCap;
          const m = Math.max(max[r]!, score);
          const rescale = Math.exp(max[r]! - m);
          const p = Math.exp(score - m);
          max[r] = m;
          denom[r] = denom[r]! * rescale + p;
          const aOff = r * headDim;
          for (let d = 0; d < headDim; d++) acc[aOff + d] = acc[aOff + d]! * rescale + p * vRow[d]!;
        }
      }
    }
    for (let i = 0; i < rows.numTokens; i++) {
      for (let g = 0; g < group; g++) {
        const r = i * group + g;
        const oOff = ((rows.firstToken + i) * numQHeads + kvh * group + g) * headDim;
        // A row that saw no key (context 0) outputs zeros rather than NaN.
        const inv = denom[r]! > 0 ? 1 / denom[r]! : 0;
        for (let d = 0; d < headDim; d++) out[oOff + d] = acc[r * headDim + d]! * inv;
      }
    }
  }
}
