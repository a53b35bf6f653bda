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
  /**
   * When set, the attention mass of the last `queries` query tokens is ADDED per logical block
   * into `out[block]` (see {@link PagedMassArgs}).
   */
  readonly mass?: { readonly queries: number; readonly out: Float32Array };
}

/**
 * Optional per-block attention mass of a paged attention reference call. Entry
 * `[s][b]` of `massOut` gains the sum, over all query heads and sequence `s`'s last
 * `massQueries[s]` query tokens, of the softmax probabilities those queries give the keys of
 * logical block `b` (so one call adds `numQHeads * massQueries[s]` over a sequence's blocks).
 * Added, not overwritten, so calls for several layers accumulate.
 */
export interface PagedMassArgs {
  /** Per sequence, u32 `[numSeqs]`: how many of its last query tokens count (0 = none). */
  readonly massQueries?: Uint32Array;
  /** f32 `[numSeqs][maxBlocksPerSeq]`, added into. Required when `massQueries` is. */
  readonly massOut?: Float32Array;
}

/**
 * Causal attention of `rows.numTokens` query tokens over one sequence's paged cache, writing the
 * output rows. Query token `i` sees cached tokens `0 .. contextLen - numTokens + i`, or with a
 * `window`, the last `window` of them.
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
  const window = config.window ?? Number.POSITIVE_INFINITY;
  // Query tokens [firstToken, lastToken) see key j: past + i >= j and past + i - j < window.
  const lastToken = (j: number) => Math.min(rows.numTokens, j - past + window);
  const numRows = rows.numTokens * group;
  const kRow = new Float32Array(headDim);
  const vRow = new Float32Array(headDim);
  const scoreOf = (i: number, g: number, kvh: number): number => {
    const qOff = ((rows.firstToken + i) * numQHeads + kvh * group + g) * headDim;
    let dot = 0;
    for (let d = 0; d < headDim; d++) dot += query[qOff + d]! * kRow[d]!;
    const score = dot * scale;
    return softCap === undefined ? score : Math.tanh(score / softCap) * softCap;
  };
  // A second pass over the keys once the softmax's max and denominator are known: the mass
  // needs normalized probabilities, which the online softmax only has at the end.
  const addMass = (
    mass: NonNullable<PagedRows['mass']>,
    max: Float64Array,
    denom: Float64Array,
    kvh: number,
  ): void => {
    const first = rows.numTokens - mass.queries;
    for (let b = 0; b * blockSize < rows.contextLen; b++) {
      const kSlab = rows.blockTable[b]! * layout.blockWords + 2 * kvh * layout.slabWords;
      let sum = 0;
      for (let j = b * blockSize; j < Math.min(rows.contextLen, (b + 1) * blockSize); j++) {
        read(cache, kSlab, j - b * blockSize, kRow);
        for (let i = Math.max(first, j - past); i < lastToken(j); i++) {
          for (let g = 0; g < group; g++) {
            const row = i * group + g;
            sum += Math.exp(scoreOf(i, g, kvh) - max[row]!) / denom[row]!;
          }
        }
      }
      mass.out[b] = mass.out[b]! + sum;
    }
  };
  // Per (token, head in group) running max, denominator and unnormalized output.
  const max = new Float64Array(numRows);
  const denom = new Float64Array(numRows);
  const acc = new Float64Array(numRows * headDim);

  for (let kvh = 0; kvh < numKvHeads; kvh++) {
    max.fill(Number.NEGATIVE_INFINITY);
    denom.fill(0);
    acc.fill(0);
    if (config.sinks !== undefined) {
      // A sink is a key every query sees with its own logit and no value: it starts each row's
      // max and denominator.
      for (let r = 0; r < numRows; r++) {
        max[r] = config.sinks[kvh * group + (r % group)]!;
        denom[r] = 1;
      }
    }
    for (let j = 0; j < rows.contextLen; j++) {
      const block = rows.blockTable[Math.floor(j / blockSize)]!;
      const t = j % blockSize;
      const kSlab = block * layout.blockWords + 2 * kvh * layout.slabWords;
      read(cache, kSlab, t, kRow);
      read(cache, kSlab + layout.slabWords, t, vRow);
      // Query token i sees key j when past + i >= j.
      const firstToken = Math.max(0, j - past);
      for (let i = firstToken; i < lastToken(j); i++) {
        for (let g = 0; g < group; g++) {
          const r = i * group + g;
          const score = scoreOf(i, g, kvh);
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
    if (rows.mass !== undefined) addMass(rows.mass, max, denom, kvh);
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

/** The `mass` field of sequence `s`'s rows, or nothing when it asks for none. @internal */
export function massOf(
  args: PagedMassArgs,
  s: number,
  maxBlocksPerSeq: number,
): { mass?: { queries: number; out: Float32Array } } {
  const queries = args.massQueries?.[s] ?? 0;
  if (queries === 0 || args.massOut === undefined) return {};
  const out = args.massOut.subarray(s * maxBlocksPerSeq, (s + 1) * maxBlocksPerSeq);
  return { mass: { queries, out } };
}
