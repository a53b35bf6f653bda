// What a group runs this step: how many tokens of each sequence fit the step's token and row
// budgets (chunked prefill, prefix hits, beams in lockstep), and their slots from the allocator.
import type { BlockCopy, CachedPrefix, ExtraKeys, KvCacheManager } from '@kvasir/kv-allocator';
import type { CompressedRow, KvCompressor } from './kv-compressor.js';
import { EMPTY_PREFIX, type Sequence, type SequenceGroup } from './request-state.js';
import type { RequestTable } from './request-table.js';
import type { KeyShift, SwapTransfer } from './types.js';

/**
 * One row of the step: tokens [start, start + len) of `seq` (indices into its tokens), written
 * to `slots`; `cacheStart` is where they start in the cache (less than `start` once
 * compression dropped tokens).
 */
export interface PlanEntry extends CompressedRow {
  start: number;
  slots: Int32Array;
  /** The slots in every KV cache group (`[0]` is `slots`). */
  groupSlots: readonly Int32Array[];
  /** Sequences sampling from this row's logits (the row's own, plus freshly forked children). */
  samples: Sequence[] | null;
}

/** What one `schedule()` call has planned so far, and the budgets it has left. */
export interface StepState {
  step: number;
  /** Tokens left in the step. */
  budget: number;
  /** Rows left in the step. */
  seqBudget: number;
  entries: PlanEntry[];
  copies: BlockCopy[];
  /** Key shifts of compressed sequences, run after `copies`. */
  keyShifts: KeyShift[];
  swapOut: SwapTransfer[];
  swapIn: SwapTransfer[];
  /** A request was preempted this step: nothing more is admitted or swapped in. */
  preempted: boolean;
}

/** A fresh step with its whole budget. */
export function newStep(step: number, tokenBudget: number, maxNumSeqs: number): StepState {
  return {
    step,
    budget: tokenBudget,
    seqBudget: maxNumSeqs,
    entries: [],
    copies: [],
    keyShifts: [],
    swapOut: [],
    swapIn: [],
    preempted: false,
  };
}

/** Limits the planner works within (the scheduler's resolved options). */
export interface PlannerLimits {
  readonly enableChunkedPrefill: boolean;
  readonly longPrefillTokenThreshold: number;
  readonly enablePrefixCaching: boolean;
  readonly maxNumBatchedTokens: number;
}

/**
 * Plans a group's chunks for a step and allocates them. Planning (`planChunks`) changes only
 * the sequences' scratch fields, so a group that does not fit costs nothing; `allocate` then
 * takes the blocks and adds the group's rows to the step.
 */
export class BatchPlanner {
  /** Prompt tokens looked up at first admission, and found in the prefix cache. */
  prefixQueryTokens = 0;
  prefixHitTokens = 0;
  /** Cached tokens re-adopted by recompute-preempted requests (kept out of the hit rate). */
  recomputeHitTokens = 0;
  private readonly blockSize: number;

  constructor(
    private readonly kvCache: KvCacheManager,
    private readonly requests: RequestTable,
    private readonly limits: PlannerLimits,
    private readonly compressor: KvCompressor,
  ) {
    this.blockSize = kvCache.blockSize;
  }

  /**
   * Sets each live sequence's `chunk` (and `prefix` for sequences not in the allocator) for
   * this step. False when the group cannot run now (budget, rows, or whole-prompt rule).
   */
  planChunks(g: SequenceGroup, st: StepState): boolean {
    let rows = 0;
    let tokens = 0;
    // Beams are compared with each other every step, so after a recompute their prefills hold
    // back the last token until every beam can compute it in the same step.
    const lockstep = g.beamWidth > 1 && g.numSeqs > 1;
    let synced = true;
    if (lockstep) {
      for (const s of g.seqs) if (s.live && !s.isDecode) synced = false;
    }
    // Decodes of a group run together: all or none, and before the group's own prefill chunks
    // take the budget.
    for (const s of g.seqs) {
      s.chunk = 0;
      if (!s.live || !s.isDecode) continue;
      if (lockstep && !synced) continue;
      if (tokens >= st.budget || rows >= st.seqBudget) return false;
      s.chunk = 1;
      tokens++;
      rows++;
    }
    // Prefills of a group's sequences (after recompute) may spread over several steps. With
    // prefix caching, one unallocated sequence of a group starts per step: the blocks it fills
    // are hashed as they are allocated, so its siblings find the prompt they share in the cache
    // next step instead of each recomputing it into blocks of its own.
    let startedOne = false;
    for (const s of g.seqs) {
      if (!s.live || s.chunk > 0) continue;
      if (!s.allocated && startedOne && this.limits.enablePrefixCaching) continue;
      if (!s.allocated) this.lookupPrefix(s, lockstep ? 2 : 1);
      const start = s.allocated ? s.numComputed : s.prefix.numTokens;
      const need = s.numTokens - start;
      if (need <= 0 || rows >= st.seqBudget || (lockstep && need === 1)) continue;
      let chunk = Math.min(need, this.limits.longPrefillTokenThreshold, st.budget - tokens);
      if (lockstep) chunk = Math.min(chunk, need - 1);
      if (s.kv) {
        const perStep = Math.min(
          this.limits.longPrefillTokenThreshold,
          this.limits.maxNumBatchedTokens,
        );
        chunk = this.compressor.adjustChunk(s, start, chunk, perStep);
      } else if (!this.limits.enableChunkedPrefill && chunk < need && !lockstep) chunk = 0;
      if (chunk <= 0) continue;
      s.chunk = chunk;
      tokens += chunk;
      rows++;
      if (!s.allocated) startedOne = true;
    }
    return rows > 0;
  }

  /** `keep`: tokens at the end that must be computed (1: the last, whose logits are needed). */
  private lookupPrefix(s: Sequence, keep: number): void {
    s.prefix = EMPTY_PREFIX;
    if (!this.limits.enablePrefixCaching || s.group.req.skipPrefixCache) return;
    const maxBlocks = Math.min(
      Math.max(0, Math.floor((s.numTokens - keep) / this.blockSize)),
      this.compressor.prefixBlockCap(s),
    );
    // The cap goes into the lookup: a sliding-window group's hit depends on where it ends.
    s.prefix = this.kvCache.findCachedPrefix(
      s.tokens.subarray(0, s.numTokens),
      s.group.req.extraKeys,
      { maxBlocks },
    );
  }

  /** New blocks the planned chunks take from the pool. */
  blocksNeeded(g: SequenceGroup): number {
    let n = 0;
    for (const s of g.seqs) {
      if (s.chunk > 0) {
        n += this.kvCache.numBlocksToAllocate(s.id, s.chunk, s.allocated ? undefined : s.prefix);
        n += this.compressor.pendingCopies(s);
      }
    }
    return n;
  }

  /**
   * Blocks the group's live sequences need at their current lengths. With prefix caching the
   * full blocks of the tokens they all start with (a parallel-sampling group's prompt) are
   * shared, so they count once.
   */
  groupBlocksBound(g: SequenceGroup): number {
    const live = g.seqs.filter((s) => s.live);
    const first = live[0];
    if (!first) return 0;
    let common = first.numTokens;
    for (const s of live) {
      common = Math.min(common, s.numTokens);
      for (let i = 0; i < common; i++) {
        if (s.tokens[i] !== first.tokens[i]) {
          common = i;
          break;
        }
      }
    }
    const shared = this.limits.enablePrefixCaching ? Math.floor(common / this.blockSize) : 0;
    let total = shared;
    for (const s of live) total += Math.ceil(s.numTokens / this.blockSize) - shared;
    // A compressed request never holds more than its policy's peak per sequence.
    if (g.req.kvCompression) total = Math.min(total, live.length * this.compressor.peakBlocks(g));
    return total;
  }

  /** Plans the group and allocates it when its blocks are free now; never preempts. */
  runIfFits(g: SequenceGroup, st: StepState): void {
    if (!this.planChunks(g, st)) return;
    if (this.blocksNeeded(g) <= this.kvCache.numAvailableBlocks()) this.allocate(g, st);
  }

  /**
   * Allocates the planned chunks and adds their rows to the step; stops at the first sequence
   * the pool cannot serve. A prompt's last token forks the group's pending parallel samples.
   * Returns the rows added.
   */
  allocate(g: SequenceGroup, st: StepState): number {
    let done = 0;
    const extraKeys: ExtraKeys | undefined = g.req.extraKeys;
    for (const s of g.seqs) {
      if (s.chunk === 0) continue;
      let start = s.numComputed;
      let prefix: CachedPrefix | undefined;
      if (!s.allocated) {
        // An earlier sibling's allocation may have reclaimed this prefix's cached blocks.
        prefix = this.kvCache.isPrefixValid(s.prefix) ? s.prefix : EMPTY_PREFIX;
        start = prefix.numTokens;
        if (prefix !== s.prefix) s.chunk = Math.min(s.chunk, s.numTokens - start);
      }
      const res = this.kvCache.allocateSlots(
        s.id,
        s.tokens.subarray(start, start + s.chunk),
        prefix ? { prefix, extraKeys } : {},
      );
      if (!res.ok) break;
      if (!s.allocated) {
        s.allocated = true;
        if (!g.everAdmitted) {
          this.prefixQueryTokens += s.numTokens;
          this.prefixHitTokens += start;
          g.numCachedPromptTokens = Math.max(g.numCachedPromptTokens, start);
        } else {
          this.recomputeHitTokens += start;
        }
        s.prefix = EMPTY_PREFIX;
      }
      s.numComputed = start + s.chunk;
      for (const c of res.copies) st.copies.push(c);
      const entry: PlanEntry = {
        seq: s,
        start,
        cacheStart: start - s.numDropped,
        len: s.chunk,
        slots: res.slotMapping,
        groupSlots: res.slotMappings,
        samples: null,
        mass: null,
        massQueries: 0,
      };
      this.compressor.onAllocated(entry, start, st.copies, st.keyShifts);
      if (s.numComputed === s.numTokens) {
        entry.samples = [s];
        // The children sample from the parent's last prompt row; they share its blocks.
        if (s.index === 0) {
          while (g.pendingForks > 0) {
            g.pendingForks--;
            entry.samples.push(this.requests.fork(s));
          }
        }
      }
      st.entries.push(entry);
      st.budget -= s.chunk;
      st.seqBudget--;
      s.chunk = 0;
      done++;
    }
    for (const s of g.seqs) s.chunk = 0;
    if (done > 0) {
      g.everAdmitted = true;
      g.scheduledStep = st.step;
    }
    return done;
  }
}
