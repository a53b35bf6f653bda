import {
  type PagedAttentionConfig,
  validateConfig,
  validateMass,
  validateSequences,
} from '../attention/config.js';
import { attendPagedRows, massOf, type PagedMassArgs } from '../attention/paged-rows-reference.js';

/**
 * Arguments of {@link pagedPrefillAttentionCpu}: a chunk of new tokens of several sequences.
 */
export interface PagedPrefillCpuArgs extends PagedMassArgs {
  /** Queries of all sequences' new tokens concatenated, f32 `[numTokens][numQHeads][headDim]`. */
  readonly query: Float32Array;
  /** One layer's paged KV cache, the new tokens' K/V already written (see `writeKvCache`). */
  readonly kvCache: Uint32Array;
  /** Physical block ids, u32 `[numSeqs][maxBlocksPerSeq]`. */
  readonly blockTables: Uint32Array;
  /** Index of each sequence's first new token in `query` (cumulative query lengths), u32 `[numSeqs]`. */
  readonly queryStarts: Uint32Array;
  /** New tokens per sequence, u32 `[numSeqs]`. */
  readonly queryLens: Uint32Array;
  /** Cached tokens per sequence after the write: past + query length, u32 `[numSeqs]`. */
  readonly contextLens: Uint32Array;
  readonly numSeqs: number;
  readonly maxBlocksPerSeq: number;
  /** Rows of `query`; default `query.length / (numQHeads * headDim)`. */
  readonly numTokens?: number;
}

/**
 * Paged causal prefill attention on the CPU: the reference twin of the WGSL kernel and the CPU
 * backend. New token `i` of a sequence with `past = contextLen - queryLen` earlier tokens sees
 * cached tokens `0 .. past + i`. Output rows of tokens not covered by any sequence are zero.
 * With `massQueries`/`massOut`, also adds each sequence's per-block attention mass over its
 * last `massQueries[s]` tokens (see {@link PagedMassArgs}).
 *
 * @returns the output, f32 `[numTokens][numQHeads][headDim]`.
 * @throws {AttentionKernelError} on inconsistent shapes, an unsupported head dim, block ids
 *   outside the cache, a query longer than its context, or a context longer than its block table.
 */
export function pagedPrefillAttentionCpu(
  config: PagedAttentionConfig,
  args: PagedPrefillCpuArgs,
): Float32Array {
  const layout = validateConfig(config);
  const rowFloats = config.numQHeads * config.headDim;
  const numTokens = args.numTokens ?? Math.floor(args.query.length / rowFloats);
  validateSequences(config, layout, {
    numSeqs: args.numSeqs,
    maxBlocksPerSeq: args.maxBlocksPerSeq,
    blockTables: args.blockTables,
    contextLens: args.contextLens,
    queryStarts: args.queryStarts,
    queryLens: args.queryLens,
    numQueryTokens: numTokens,
    queryLength: args.query.length,
    cacheWords: args.kvCache.length,
  });
  validateMass(args, args.numSeqs, args.maxBlocksPerSeq, args.queryLens);
  const out = new Float32Array(numTokens * rowFloats);
  for (let s = 0; s < args.numSeqs; s++) {
    attendPagedRows(config, args.kvCache, args.query, out, {
      blockTable: args.blockTables.subarray(
        s * args.maxBlocksPerSeq,
        (s + 1) * args.maxBlocksPerSeq,
      ),
      contextLen: args.contextLens[s]!,
      firstToken: args.queryStarts[s]!,
      numTokens: args.queryLens[s]!,
      ...massOf(args, s, args.maxBlocksPerSeq),
    });
  }
  return out;
}
