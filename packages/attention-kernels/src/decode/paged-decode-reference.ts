import {
  type PagedAttentionConfig,
  validateConfig,
  validateMass,
  validateSequences,
} from '../attention/config.js';
import { attendPagedRows, massOf, type PagedMassArgs } from '../attention/paged-rows-reference.js';

/**
 * Arguments of {@link pagedDecodeAttentionCpu}: one query token per sequence.
 */
export interface PagedDecodeCpuArgs extends PagedMassArgs {
  /** Queries, f32 `[numSeqs][numQHeads][headDim]`. */
  readonly query: Float32Array;
  /** One layer's paged KV cache in the layout of the package README (whole blocks). */
  readonly kvCache: Uint32Array;
  /** Physical block ids, u32 `[numSeqs][maxBlocksPerSeq]` (entries past a sequence's blocks are ignored). */
  readonly blockTables: Uint32Array;
  /** Tokens in each sequence's cache including the current one, u32 `[numSeqs]`. */
  readonly contextLens: Uint32Array;
  readonly numSeqs: number;
  readonly maxBlocksPerSeq: number;
}

/**
 * Paged decode attention on the CPU: the reference twin of the WGSL kernel and the CPU backend.
 * Each sequence's single query attends to all `contextLens[s]` cached tokens (the newest one
 * included, so its K/V must already be written). A KV row is decoded once per group of query
 * heads that share it. Accumulates in f64. With `massQueries`/`massOut`, also adds each
 * sequence's per-block attention mass (see {@link PagedMassArgs}).
 *
 * @returns the output, f32 `[numSeqs][numQHeads][headDim]`.
 * @throws {AttentionKernelError} on inconsistent shapes, an unsupported head dim, block ids
 *   outside the cache, or a context longer than its block table.
 */
export function pagedDecodeAttentionCpu(
  config: PagedAttentionConfig,
  args: PagedDecodeCpuArgs,
): Float32Array {
  const layout = validateConfig(config);
  const { numSeqs, maxBlocksPerSeq } = args;
  // A sequence with context 0 (batch padding) has no query row to check and outputs zeros.
  const queryLens = args.contextLens.map((c) => (c > 0 ? 1 : 0));
  const queryStarts = Uint32Array.from({ length: numSeqs }, (_, s) => s);
  validateSequences(config, layout, {
    numSeqs,
    maxBlocksPerSeq,
    blockTables: args.blockTables,
    contextLens: args.contextLens,
    queryStarts,
    queryLens,
    numQueryTokens: numSeqs,
    queryLength: args.query.length,
    cacheWords: args.kvCache.length,
  });
  validateMass(args, numSeqs, maxBlocksPerSeq, queryLens);
  const out = new Float32Array(numSeqs * config.numQHeads * config.headDim);
  for (let s = 0; s < numSeqs; s++) {
    attendPagedRows(config, args.kvCache, args.query, out, {
      blockTable: args.blockTables.subarray(s * maxBlocksPerSeq, (s + 1) * maxBlocksPerSeq),
      contextLen: args.contextLens[s]!,
      firstToken: s,
      numTokens: 1,
      ...massOf(args, s, maxBlocksPerSeq),
    });
  }
  return out;
}
