// A request's state inside the scheduler: one `SequenceGroup` per request, one `Sequence` per
// sample or beam. Nothing here talks to the allocator but to read block tables; moving blocks
// is the planner's, preemption's and the request table's job.
import type { CachedPrefix, KvCacheManager } from '@kvasir/kv-allocator';
import { CompressedBlocks } from './kv-compression/compressed-blocks.js';
import type { QueuedRequest, RunningRequest } from './policies.js';
import type { FinishReason, SchedulerRequest, SequenceOutput } from './types.js';

/** In the waiting queue: never admitted, or preempted by recompute. */
export const WAITING = 0;
/** Holds blocks and is planned every step. */
export const RUNNING = 1;
/** Preempted by swap: its blocks sit in host slots. */
export const SWAPPED = 2;
/** Ended; its output was assembled and nothing of it is left in the scheduler. */
export const FINISHED = 3;
export type GroupState = typeof WAITING | typeof RUNNING | typeof SWAPPED | typeof FINISHED;

/** No cached prefix (shared: never mutated). */
export const EMPTY_PREFIX: CachedPrefix = Object.freeze({ numTokens: 0, blocks: [], hashes: [] });

/** One sequence of tokens with its own KV blocks in the allocator (allocator id = `id`). */
export class Sequence {
  tokens: Int32Array;
  numTokens: number;
  /** Tokens whose KV is in the cache, or scheduled to be written by an issued plan. */
  numComputed = 0;
  /** The allocator knows this sequence. */
  allocated = false;
  finishReason: FinishReason | undefined = undefined;
  cumLogprob = 0;
  /** Host slot per logical block while swapped out. */
  hostSlots: Int32Array | null = null;
  /** Planning scratch for the current step: tokens to compute. */
  chunk = 0;
  /** Planning scratch: the cached prefix an unallocated sequence starts from. */
  prefix: CachedPrefix = EMPTY_PREFIX;
  /** The `update()` call that last sampled it (catches a sequence sampled twice). */
  updateStamp = 0;
  /** Tokens dropped from its cache by KV compression (`numComputed − numDropped` are cached). */
  numDropped = 0;
  /** Per-block compression state, for a request with `kvCompression`. */
  kv: CompressedBlocks | null;

  constructor(
    readonly id: number,
    readonly index: number,
    readonly group: SequenceGroup,
    tokens: Int32Array,
    numTokens: number,
  ) {
    this.tokens = tokens;
    this.numTokens = numTokens;
    this.kv = group.req.kvCompression ? new CompressedBlocks() : null;
  }

  /** Tokens in the cache (or to be written by an issued plan). */
  get numCached(): number {
    return this.numComputed - this.numDropped;
  }

  /** Back to nothing computed (recompute preemption). */
  resetComputed(): void {
    this.numComputed = 0;
    this.numDropped = 0;
    this.kv?.reset();
  }

  get live(): boolean {
    return this.finishReason === undefined;
  }

  get numOutputTokens(): number {
    return this.numTokens - this.group.numPromptTokens;
  }

  /** In the allocator with exactly one token left to compute: it runs as a decode next. */
  get isDecode(): boolean {
    return this.allocated && this.numTokens - this.numComputed === 1;
  }

  append(token: number, maxModelLen: number): void {
    if (this.numTokens === this.tokens.length) {
      // Grow geometrically, but never past the longest sequence the request can reach.
      const cap = this.group.lengthCap(maxModelLen) + 1;
      const grown = new Int32Array(
        Math.max(this.numTokens + 1, Math.min(cap, this.tokens.length * 2)),
      );
      grown.set(this.tokens);
      this.tokens = grown;
    }
    this.tokens[this.numTokens++] = token;
  }
}

/**
 * Everything the scheduler keeps about one request: its sequences (n parallel samples or
 * beams, sharing prompt blocks), where it is (`state`), and what its output will report. It is
 * also what the queue and preemption policies see (`QueuedRequest`, `RunningRequest`).
 */
export class SequenceGroup implements QueuedRequest, RunningRequest {
  state: GroupState = WAITING;
  seqs: Sequence[] = [];
  /** n − 1 children still to fork when the prompt completes (parallel sampling). */
  pendingForks: number;
  numPreemptions = 0;
  everAdmitted = false;
  numCachedPromptTokens = 0;
  firstTokenTime: number | undefined = undefined;
  scheduledStep = 0;
  /** Queue-policy rank, refreshed each step. */
  rank = 0;
  /** Every host slot the group holds while swapped (shared blocks share a slot). */
  hostSlotList: number[] = [];
  /** Beam search: finished hypotheses. */
  finishedBeams: SequenceOutput[] = [];
  /** Index of the next forked sequence (0 is the first sequence's). */
  nextIndex = 1;
  /** Blocks its KV compression policy may hold (`maxBlocks`, read once at `add`); 0: none. */
  keepBlocks = 0;
  readonly stopTokens: Set<number>;

  constructor(
    readonly req: SchedulerRequest,
    readonly arrivalIndex: number,
    readonly arrivalTime: number,
    readonly priority: number,
    readonly numPromptTokens: number,
    readonly eos: number | undefined,
    readonly beamWidth: number,
  ) {
    this.pendingForks = (req.n ?? 1) - 1;
    this.stopTokens = new Set(req.stopTokenIds ?? []);
  }

  get requestId(): string {
    return this.req.id;
  }

  get numComputedTokens(): number {
    let t = 0;
    for (const s of this.seqs) if (s.live) t += s.numCached;
    return t;
  }

  /**
   * Longest a sequence of this request may grow: the model's context, or with compression in
   * 'cache' positions (positions stay below the cache size) the prompt plus `maxTokens`.
   */
  lengthCap(maxModelLen: number): number {
    return this.req.kvCompression?.positions === 'cache'
      ? this.numPromptTokens + this.req.maxTokens
      : maxModelLen;
  }

  /** Some sequence dropped blocks: its cache no longer is a prefix of its tokens. */
  get hasDroppedBlocks(): boolean {
    for (const s of this.seqs) if (s.numDropped > 0) return true;
    return false;
  }

  get numSeqs(): number {
    let n = 0;
    for (const s of this.seqs) if (s.live) n++;
    return n;
  }

  /** Every live, allocated sequence is a decode (a group's decodes are planned first). */
  get isDecode(): boolean {
    for (const s of this.seqs) {
      if (s.live && s.allocated && s.numTokens - s.numComputed > 1) return false;
    }
    return true;
  }

  /** A stop token id, or EOS unless the request ignores it. */
  isStopToken(token: number): boolean {
    return this.stopTokens.has(token) || (token === this.eos && !this.req.ignoreEos);
  }

  /** Why `seq` ends after `token` was appended to it, or undefined when it goes on. */
  stopReason(seq: Sequence, token: number, maxModelLen: number): FinishReason | undefined {
    if (this.isStopToken(token)) return 'stop';
    if (seq.numOutputTokens >= this.req.maxTokens || seq.numTokens >= this.lengthCap(maxModelLen)) {
      return 'length';
    }
    return undefined;
  }

  /** Distinct blocks the group's allocated sequences hold (shared blocks count once). */
  heldBlocks(kvCache: KvCacheManager): number {
    const seen = new Set<number>();
    for (const s of this.seqs) {
      if (!s.allocated) continue;
      // Every KV group's table; a sliding group's released blocks are holes (-1).
      for (const table of kvCache.blockTables(s.id)) for (const b of table) if (b >= 0) seen.add(b);
    }
    return seen.size;
  }
}

/** Most important first: lower priority value, then earlier arrival. */
export function byImportance(a: SequenceGroup, b: SequenceGroup): number {
  return (
    a.priority - b.priority || a.arrivalTime - b.arrivalTime || a.arrivalIndex - b.arrivalIndex
  );
}
