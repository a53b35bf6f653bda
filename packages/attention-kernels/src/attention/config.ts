import { AttentionKernelError } from '../errors.js';
import { type KvCacheConfig, type KvCacheLayout, kvCacheLayout } from '../layout.js';

/**
 * Head dims with a kernel: multiples of 16 up to 128 (the V phases split a row into 8-element
 * chunks owned 2 or 4 at a time; rows stay in registers, so larger dims would spill). The CPU
 * references follow the same list.
 */
export const PAGED_ATTENTION_HEAD_DIMS: readonly number[] = [16, 32, 48, 64, 80, 96, 112, 128];

/**
 * What fixes a paged attention kernel: the model's head geometry, the cache's block size and
 * element format, and the score transform. One kernel object is built per configuration.
 */
export interface PagedAttentionConfig extends KvCacheConfig {
  /** Query heads; a multiple of `numKvHeads` (equal: MHA, one KV head: MQA, otherwise GQA). */
  readonly numQHeads: number;
  /** Multiplier of `q·k`; default `1 / sqrt(headDim)`. */
  readonly scale?: number;
  /** When set, scores become `tanh(s / softCap) * softCap` (Gemma-2 style). */
  readonly softCap?: number;
  /**
   * Sliding-window attention: when set, a query sees only the last `window` positions of its
   * causal range, its own included (Gemma 3's and Mistral's local layers: key j is visible to
   * the query at position p when `p - window < j <= p`). Absent: the whole range.
   */
  readonly window?: number;
  /**
   * Attention sinks (gpt-oss): one learned logit per query head that joins every softmax's
   * max and denominator as a key with no value, so a head may attend to less than all of its
   * keys. Absent: none.
   */
  readonly sinks?: readonly number[];
}

/** Decodes token `t` of the slab starting at word `slabStart` into `out` (headDim floats). */
export type RowReader = (
  cache: Uint32Array,
  slabStart: number,
  t: number,
  out: Float32Array,
) => void;

/** @internal */
export function pagedLayout(config: PagedAttentionConfig): KvCacheLayout {
  return kvCacheLayout(config);
}

/** @internal */
export function rowReaderFor(layout: KvCacheLayout): RowReader {
  const { format, blockSize } = layout;
  return (cache, slabStart, t, out) => format.decodeRow(cache, slabStart, t, out, blockSize);
}

/** @internal */
export function resolveScale(config: PagedAttentionConfig): number {
  return config.scale ?? 1 / Math.sqrt(config.headDim);
}

function positiveInt(value: number, name: string): void {
  if (!Number.isInteger(value) || value <= 0) {
    throw new AttentionKernelError(
      'INVALID_ARGUMENT',
      `${name} must be a positive integer, got ${value}`,
      {
        details: { [name]: value },
      },
    );
  }
}

/**
 * Checks a configuration on its own and returns its cache layout.
 *
 * @throws {AttentionKernelError} `UNSUPPORTED_HEAD_DIM`, `UNSUPPORTED_FORMAT` or `INVALID_ARGUMENT`.
 * @internal
 */
export function validateConfig(config: PagedAttentionConfig): KvCacheLayout {
  positiveInt(config.numQHeads, 'numQHeads');
  positiveInt(config.numKvHeads, 'numKvHeads');
  positiveInt(config.blockSize, 'blockSize');
  if (config.numQHeads % config.numKvHeads !== 0) {
    throw new AttentionKernelError(
      'INVALID_ARGUMENT',
      `numQHeads (${config.numQHeads}) must be a multiple of numKvHeads (${config.numKvHeads})`,
      { details: { numQHeads: config.numQHeads, numKvHeads: config.numKvHeads } },
    );
  }
  if (!PAGED_ATTENTION_HEAD_DIMS.includes(config.headDim)) {
    throw new AttentionKernelError(
      'UNSUPPORTED_HEAD_DIM',
      `no paged attention kernel for headDim ${config.headDim}; supported: ${PAGED_ATTENTION_HEAD_DIMS.join(', ')}`,
      { details: { headDim: config.headDim } },
    );
  }
  if (config.scale !== undefined && !(Number.isFinite(config.scale) && config.scale > 0)) {
    throw new AttentionKernelError(
      'INVALID_ARGUMENT',
      `scale must be finite and > 0, got ${config.scale}`,
    );
  }
  if (config.window !== undefined) positiveInt(config.window, 'window');
  if (
    config.sinks !== undefined &&
    (config.sinks.length !== config.numQHeads || !config.sinks.every((v) => Number.isFinite(v)))
  ) {
    throw new AttentionKernelError(
      'INVALID_ARGUMENT',
      `sinks must hold one finite logit per query head (${config.numQHeads}), got ${config.sinks.length}`,
      { details: { sinks: config.sinks.length } },
    );
  }
  if (config.softCap !== undefined && !(Number.isFinite(config.softCap) && config.softCap > 0)) {
    throw new AttentionKernelError(
      'INVALID_ARGUMENT',
      `softCap must be finite and > 0, got ${config.softCap}`,
    );
  }
  return kvCacheLayout(config);
}

/** Host-side description of a batch, checked by {@link validateSequences}. */
export interface SequenceBatch {
  readonly numSeqs: number;
  readonly maxBlocksPerSeq: number;
  readonly blockTables: Uint32Array;
  readonly contextLens: Uint32Array;
  /** Index of each sequence's first query token in the concatenated query rows. */
  readonly queryStarts: Uint32Array;
  readonly queryLens: Uint32Array;
  readonly numQueryTokens: number;
  /** Length in f32 of the query array (or buffer), when known. */
  readonly queryLength?: number;
  /** Length in u32 words of the cache array (or buffer), when known here. */
  readonly cacheWords?: number;
}

/** What {@link validateSequences} learned about a valid batch. */
export interface BatchFacts {
  /** Largest block id any sequence uses (-1 when no sequence has a token). */
  readonly maxBlockId: number;
  readonly maxContextLen: number;
}

/**
 * Checks a batch against a configuration: array lengths, contexts within block tables, block ids
 * within the cache, query ranges within the query rows.
 *
 * @throws {AttentionKernelError} `SHAPE_MISMATCH`, `CONTEXT_TOO_LONG`, `BLOCK_OUT_OF_RANGE` or
 *   `INVALID_ARGUMENT`.
 * @internal
 */
export function validateSequences(
  config: PagedAttentionConfig,
  layout: KvCacheLayout,
  batch: SequenceBatch,
): BatchFacts {
  const { numSeqs, maxBlocksPerSeq, blockTables, contextLens, queryStarts, queryLens } = batch;
  positiveInt(numSeqs, 'numSeqs');
  positiveInt(maxBlocksPerSeq, 'maxBlocksPerSeq');
  const mismatch = (what: string, got: number, want: number): never => {
    throw new AttentionKernelError(
      'SHAPE_MISMATCH',
      `${what} has length ${got}, expected ${want}`,
      {
        details: { what, got, want },
      },
    );
  };
  if (blockTables.length !== numSeqs * maxBlocksPerSeq) {
    mismatch('blockTables', blockTables.length, numSeqs * maxBlocksPerSeq);
  }
  if (contextLens.length !== numSeqs) mismatch('contextLens', contextLens.length, numSeqs);
  if (queryStarts.length !== numSeqs) mismatch('queryStarts', queryStarts.length, numSeqs);
  if (queryLens.length !== numSeqs) mismatch('queryLens', queryLens.length, numSeqs);
  const qLen = batch.numQueryTokens * config.numQHeads * config.headDim;
  if (batch.queryLength !== undefined && batch.queryLength !== qLen) {
    mismatch('query', batch.queryLength, qLen);
  }
  let numBlocks = Number.POSITIVE_INFINITY;
  if (batch.cacheWords !== undefined) {
    if (batch.cacheWords % layout.blockWords !== 0 || batch.cacheWords === 0) {
      throw new AttentionKernelError(
        'SHAPE_MISMATCH',
        `kvCache has ${batch.cacheWords} words, not a positive multiple of the block size ${layout.blockWords} words`,
        { details: { cacheWords: batch.cacheWords, blockWords: layout.blockWords } },
      );
    }
    numBlocks = batch.cacheWords / layout.blockWords;
  }
  let maxBlockId = -1;
  let maxContextLen = 0;
  for (let s = 0; s < numSeqs; s++) {
    const ctx = contextLens[s]!;
    const qStart = queryStarts[s]!;
    const qn = queryLens[s]!;
    if (qn > ctx) {
      throw new AttentionKernelError(
        'INVALID_ARGUMENT',
        `sequence ${s}: query length ${qn} exceeds its context length ${ctx}`,
        { details: { seq: s, queryLen: qn, contextLen: ctx } },
      );
    }
    if (qStart + qn > batch.numQueryTokens) {
      throw new AttentionKernelError(
        'SHAPE_MISMATCH',
        `sequence ${s}: query rows ${qStart}..${qStart + qn} exceed the ${batch.numQueryTokens} query tokens`,
        { details: { seq: s, queryStart: qStart, queryLen: qn } },
      );
    }
    maxContextLen = Math.max(maxContextLen, ctx);
    const blocks = Math.ceil(ctx / config.blockSize);
    if (blocks > maxBlocksPerSeq) {
      throw new AttentionKernelError(
        'CONTEXT_TOO_LONG',
        `sequence ${s}: context length ${ctx} needs ${blocks} blocks, the block table holds ${maxBlocksPerSeq}`,
        { details: { seq: s, contextLen: ctx, maxBlocksPerSeq } },
      );
    }
    for (let b = 0; b < blocks; b++) {
      const id = blockTables[s * maxBlocksPerSeq + b]!;
      if (id >= numBlocks) {
        throw new AttentionKernelError(
          'BLOCK_OUT_OF_RANGE',
          `sequence ${s}: block table entry ${b} is ${id}, the cache holds ${numBlocks} blocks`,
          { details: { seq: s, entry: b, blockId: id, numBlocks } },
        );
      }
      if (id > maxBlockId) maxBlockId = id;
    }
  }
  return { maxBlockId, maxContextLen };
}

/**
 * Checks that a cache of `numBlocks` blocks holds every block a batch uses.
 *
 * @throws {AttentionKernelError} `BLOCK_OUT_OF_RANGE`.
 * @internal
 */
export function requireBlocks(maxBlockId: number, numBlocks: number): void {
  if (maxBlockId >= numBlocks) {
    throw new AttentionKernelError(
      'BLOCK_OUT_OF_RANGE',
      `the block tables use block ${maxBlockId}, the cache holds ${numBlocks} blocks`,
      { details: { blockId: maxBlockId, numBlocks } },
    );
  }
}

/** Most query rows (tokens × heads of one group) one workgroup handles. */
export const MAX_ROWS_PER_WORKGROUP = 8;

/**
 * Query heads of one KV head's group handled per workgroup: the group itself when it has at most
 * {@link MAX_ROWS_PER_WORKGROUP} heads, else its largest divisor that does (register pressure).
 * @internal
 */
export function headsPerWorkgroup(group: number): number {
  for (let h = Math.min(group, MAX_ROWS_PER_WORKGROUP); h > 1; h--) {
    if (group % h === 0) return h;
  }
  return 1;
}

/**
 * Checks the optional attention-mass arguments of a paged attention call: `massQueries` (one
 * per sequence, each at most its query length) and `massOut` (`[numSeqs][maxBlocksPerSeq]`)
 * together or not at all. Returns whether any sequence asks for mass.
 *
 * @throws {AttentionKernelError} `SHAPE_MISMATCH` or `INVALID_ARGUMENT` naming the sequence.
 * @internal
 */
export function validateMass(
  mass: { readonly massQueries?: Uint32Array; readonly massOut?: Float32Array | number },
  numSeqs: number,
  maxBlocksPerSeq: number,
  queryLens: ArrayLike<number>,
): boolean {
  const { massQueries, massOut } = mass;
  if (massQueries === undefined && massOut === undefined) return false;
  if (massQueries === undefined || massOut === undefined) {
    throw new AttentionKernelError(
      'INVALID_ARGUMENT',
      'massQueries and massOut go together: pass both or neither',
    );
  }
  if (massQueries.length !== numSeqs) {
    throw new AttentionKernelError(
      'SHAPE_MISMATCH',
      `massQueries has length ${massQueries.length}, expected ${numSeqs}`,
    );
  }
  const outLen = typeof massOut === 'number' ? massOut : massOut.length;
  if (outLen < numSeqs * maxBlocksPerSeq) {
    throw new AttentionKernelError(
      'SHAPE_MISMATCH',
      `massOut holds ${outLen} floats, expected [${numSeqs}][${maxBlocksPerSeq}] = ${numSeqs * maxBlocksPerSeq}`,
    );
  }
  let any = false;
  for (let s = 0; s < numSeqs; s++) {
    const m = massQueries[s]!;
    if (m > queryLens[s]!) {
      throw new AttentionKernelError(
        'INVALID_ARGUMENT',
        `sequence ${s}: massQueries ${m} exceeds its query length ${queryLens[s]}`,
        { details: { seq: s, massQueries: m, queryLen: queryLens[s] } },
      );
    }
    if (m > 0) any = true;
  }
  return any;
}
