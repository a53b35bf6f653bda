import type { KvCacheManager } from '@kvasir/kv-allocator';
import { buildBatchPlan } from './batch-plan.js';
import { BatchPlanner, newStep, type PlanEntry, type StepState } from './batch-planner.js';
import { SchedulerError } from './errors.js';
import { KvCompressor } from './kv-compressor.js';
import { Preemptor } from './preemption.js';
import {
  byImportance,
  FINISHED,
  RUNNING,
  SequenceGroup,
  SWAPPED,
  WAITING,
} from './request-state.js';
import { RequestTable } from './request-table.js';
import {
  type ResolvedSchedulerOptions,
  resolveSchedulerOptions,
  type SchedulerOptions,
} from './scheduler-options.js';
import { applyStepResult } from './step-result.js';
import { SwapSpace } from './swap-space.js';
import type {
  BatchPlan,
  LiveRequestSequences,
  PreemptionMode,
  RequestOutput,
  SchedulerEvent,
  SchedulerMetrics,
  SchedulerRequest,
  StepResult,
} from './types.js';
import { checkRequest } from './validate.js';
import { WaitingQueue } from './waiting-queue.js';

/**
 * Iteration-level (continuous) batching over a paged KV cache, after vLLM's scheduler and
 * Orca's iteration-level scheduling.
 *
 * Each `schedule()` builds one batch plan: running decodes first, then running prefill chunks,
 * then swapped-out requests coming back, then waiting requests in queue-policy order, within
 * `maxNumBatchedTokens` and `maxNumSeqs`. When the allocator runs out of blocks, a running
 * request is preempted (recompute or swap). `update()` appends the sampled tokens, applies
 * stop conditions and frees finished sequences.
 *
 * Contract with the engine: run every plan, in order (even when a request in it was aborted
 * meanwhile: its blocks may already be registered in the prefix cache), each one's swaps and
 * copies before its forward pass; call `update()` with a plan's samples before the next
 * `schedule()`.
 */
export class Scheduler {
  readonly maxModelLen: number;
  readonly maxNumSeqs: number;
  readonly maxNumBatchedTokens: number;
  readonly enableChunkedPrefill: boolean;
  readonly longPrefillTokenThreshold: number;
  readonly enablePrefixCaching: boolean;
  readonly preemptionMode: PreemptionMode;
  readonly kvCache: KvCacheManager;
  private readonly config: ResolvedSchedulerOptions;

  private readonly requests: RequestTable;
  private readonly waiting: WaitingQueue;
  private readonly planner: BatchPlanner;
  private readonly swap: SwapSpace;
  private readonly preemptor: Preemptor;
  private readonly compressor: KvCompressor;
  /** The last plan's rows: `update()` applies compression to them. */
  private lastRows: PlanEntry[] = [];
  /** Admitted requests; entries that left the running state go at the next step. */
  private running: SequenceGroup[] = [];
  private nextArrivalIndex = 0;
  private stepNo = 0;
  private updateNo = 0;
  private lastStepTokens = 0;
  private budgetUseSum = 0;

  /**
   * @throws {SchedulerError} INVALID_CONFIG for a bad option, naming it; INVALID_POLICY for a
   *   policy not made by its `define…()` helper.
   */
  constructor(options: SchedulerOptions) {
    const o = resolveSchedulerOptions(options);
    this.kvCache = o.kvCache;
    this.maxModelLen = o.maxModelLen;
    this.maxNumSeqs = o.maxNumSeqs;
    this.maxNumBatchedTokens = o.maxNumBatchedTokens;
    this.enableChunkedPrefill = o.enableChunkedPrefill;
    this.longPrefillTokenThreshold = o.longPrefillTokenThreshold;
    this.enablePrefixCaching = o.enablePrefixCaching;
    this.preemptionMode = o.preemptionMode;
    this.config = o;

    const now = () => this.now();
    const emit = (e: SchedulerEvent) => o.onEvent?.(e);
    this.requests = new RequestTable(this.kvCache, o.hostSlots, this.maxModelLen, now, emit);
    this.waiting = new WaitingQueue(o.queuePolicy, this.kvCache, this.enablePrefixCaching, now);
    this.compressor = new KvCompressor(this.kvCache, this.maxModelLen);
    this.planner = new BatchPlanner(this.kvCache, this.requests, o, this.compressor);
    this.swap = new SwapSpace(
      this.kvCache,
      o.hostSlots,
      this.planner,
      this.waiting,
      this.enablePrefixCaching,
      emit,
    );
    this.preemptor = new Preemptor(
      this.kvCache,
      this.preemptionMode,
      o.preemptionPolicy,
      this.swap,
      this.waiting,
      emit,
    );
  }

  private now(): number {
    return this.config.clock ? this.config.clock() : this.stepNo;
  }

  /**
   * Queues a request. One whose prompt alone needs more blocks than the whole cache ends at
   * once with finish reason 'rejected' (delivered by the next `update()`), instead of being
   * preempted and resumed forever.
   * @throws {SchedulerError} INVALID_REQUEST (bad field, named in the message) or
   *   DUPLICATE_REQUEST; INVALID_POLICY when its compression policy's `maxBlocks` throws (read
   *   once, here); nothing changes.
   */
  add(request: SchedulerRequest): void {
    const { keepBlocks } = checkRequest(request, {
      maxModelLen: this.maxModelLen,
      maxNumSeqs: this.maxNumSeqs,
      maxNumBatchedTokens: this.maxNumBatchedTokens,
      blockSize: this.kvCache.blockSize,
    });
    if (this.requests.has(request.id)) {
      throw new SchedulerError('DUPLICATE_REQUEST', `request ${request.id} is already queued`, {
        details: { requestId: request.id },
      });
    }
    const promptLen = request.promptTokenIds.length;
    const g = new SequenceGroup(
      request,
      this.nextArrivalIndex++,
      request.arrivalTime ?? this.now(),
      request.priority ?? 0,
      promptLen,
      request.eosTokenId ?? this.config.eosTokenId,
      request.beamWidth ?? 1,
    );
    g.keepBlocks = keepBlocks;
    this.requests.add(g, request);
    let promptBlocks = Math.ceil(promptLen / this.kvCache.blockSize);
    if (request.kvCompression) promptBlocks = Math.min(promptBlocks, this.compressor.peakBlocks(g));
    if (promptBlocks > this.kvCache.numBlocks) {
      this.requests.finish(
        g,
        'rejected',
        `prompt needs ${promptBlocks} KV blocks but the cache has ${this.kvCache.numBlocks}: it can never fit`,
      );
      return;
    }
    this.waiting.push(g);
  }

  /**
   * Ends a request now, whatever its state; its blocks and host slots come back at once.
   * Returns its output, or undefined when no live request has this id (already ended).
   * `keepCached: false` is for a request whose KV cannot be trusted (the step that was to
   * write it failed, or its swapped-out blocks were lost): blocks only it held are freed
   * without entering the prefix cache.
   */
  abort(
    requestId: string,
    options: { readonly keepCached?: boolean } = {},
  ): RequestOutput | undefined {
    const g = this.requests.get(requestId);
    if (!g || g.state === FINISHED) return undefined;
    return this.requests.finish(g, 'abort', undefined, false, options.keepCached ?? true);
  }

  /** True while any request is waiting, running or swapped out. */
  hasUnfinished(): boolean {
    return this.requests.size > 0;
  }

  /** Live requests. */
  get numUnfinished(): number {
    return this.requests.size;
  }

  /** Plans the next step. Never throws for a valid state; an empty plan means nothing to run. */
  schedule(): BatchPlan {
    this.swap.releaseDeferred();
    const st = newStep(++this.stepNo, this.maxNumBatchedTokens, this.maxNumSeqs);
    // Most important first, so the least important are still unscheduled (and preemptible)
    // when blocks run out.
    this.running = this.running.filter((g) => g.state === RUNNING).sort(byImportance);
    for (let phase = 0; phase < 2; phase++) {
      for (let i = 0; i < this.running.length; i++) {
        const g = this.running[i]!;
        if (g.state !== RUNNING || g.scheduledStep === st.step) continue;
        if (g.isDecode !== (phase === 0)) continue;
        this.scheduleRunning(g, st);
      }
    }
    this.running = this.running.filter((g) => g.state === RUNNING);
    if (!st.preempted) this.swap.swapIn(st, this.running);
    this.swap.prune();
    if (!st.preempted && this.swap.length === 0) this.admitWaiting(st);
    this.waiting.prune();
    const plan = buildBatchPlan(st, this.kvCache, this.maxNumBatchedTokens);
    this.lastRows = st.entries;
    this.lastStepTokens = plan.numTokens;
    this.budgetUseSum += plan.numTokens / this.maxNumBatchedTokens;
    this.config.onEvent?.({
      type: 'step',
      step: st.step,
      numTokens: plan.numTokens,
      tokenBudget: this.maxNumBatchedTokens,
      numRows: plan.rows.length,
      maxNumSeqs: this.maxNumSeqs,
    });
    return plan;
  }

  /** Runs a running group's next tokens, preempting less important requests until they fit. */
  private scheduleRunning(g: SequenceGroup, st: StepState): void {
    for (;;) {
      if (!this.planner.planChunks(g, st)) return;
      const needed = this.planner.blocksNeeded(g);
      if (needed <= this.kvCache.numAvailableBlocks()) {
        this.planner.allocate(g, st);
        return;
      }
      const held = g.heldBlocks(this.kvCache);
      if (held + needed > this.kvCache.numBlocks) {
        this.requests.finish(
          g,
          'length',
          `KV cache full: the request needs ${held + needed} blocks, the cache has ${this.kvCache.numBlocks}`,
        );
        return;
      }
      const victim = this.preemptor.chooseVictim(this.running, st.step);
      if (victim === g && !this.running.some((r) => r !== g && r.state === RUNNING)) {
        // Alone and still short of blocks: preempting itself would only repeat forever.
        this.requests.finish(
          g,
          'length',
          `KV cache full: the request alone needs more than the cache's ${this.kvCache.numBlocks} blocks`,
        );
        return;
      }
      this.preemptor.preempt(victim, st);
      if (victim === g) return;
    }
  }

  /**
   * Admits waiting requests in queue order while they fit, keeping the watermark free unless
   * nothing else holds blocks; stops at the first that does not fit (no overtaking).
   */
  private admitWaiting(st: StepState): void {
    if (this.waiting.length === 0) return;
    for (const g of this.waiting.ordered()) {
      if (st.budget <= 0 || st.seqBudget <= 0) return;
      if (g.state !== WAITING) continue;
      if (!this.planner.planChunks(g, st)) return;
      const needed = this.planner.blocksNeeded(g);
      const idle = this.running.length === 0 && this.swap.length === 0;
      const reserve = idle ? 0 : this.config.watermarkBlocks;
      if (needed + reserve > this.kvCache.numAvailableBlocks()) {
        if (idle) {
          // Nothing else holds blocks: this request alone exceeds the cache.
          const total = this.planner.groupBlocksBound(g);
          if (total > this.kvCache.numBlocks) {
            this.requests.finish(
              g,
              'length',
              `KV cache full: the request needs ${total} blocks, the cache has ${this.kvCache.numBlocks}`,
            );
            continue;
          }
        }
        for (const s of g.seqs) s.chunk = 0;
        return;
      }
      if (this.planner.allocate(g, st) === 0) return;
      g.state = RUNNING;
      this.running.push(g);
    }
  }

  /**
   * Appends the sampled tokens (and the tokens forced after them: jump-forward decoding,
   * computed in the next steps as one chunk), applies stop conditions (stop token ids, EOS
   * unless ignored, max tokens, maxModelLen) and frees finished sequences. Samples of requests that ended
   * meanwhile (aborted) are ignored. Then every compressed sequence of the plan adds its rows'
   * attention mass to its block scores and drops what its policy selects (key shifts follow in
   * the next plan). Returns every request that ended since the last call (finished, or
   * rejected), except aborts, which `abort()` returned.
   * @throws {SchedulerError} INVALID_RESULT for misaligned arrays, a bad token id, a sequence
   *   that was not waiting for a token, or missing beam candidates; nothing changes then.
   *   INVALID_POLICY when a compression policy selected a block it cannot drop (the step is
   *   applied; that sequence only lost the oldest blocks beyond its policy's `maxBlocks`; its
   *   outputs come with the next call).
   */
  update(result: StepResult = { seqIds: [], tokenIds: [] }): RequestOutput[] {
    // The plan that swapped these in has run by now.
    this.swap.releaseDeferred();
    const stamp = ++this.updateNo;
    applyStepResult(result, this.requests, stamp, () => this.now(), this.maxModelLen);
    const rows = this.lastRows;
    this.lastRows = [];
    this.compressor.afterStep(rows);
    return this.requests.takeFinished();
  }

  /**
   * Each live request, in no set order, with its state and unfinished sequences (their ids
   * key the allocator's block tables). O(live sequences); for pictures of the cache.
   */
  liveSequences(): LiveRequestSequences[] {
    const out: LiveRequestSequences[] = [];
    for (const g of this.requests.values()) {
      if (g.state === FINISHED) continue;
      out.push({
        requestId: g.requestId,
        state: g.state === RUNNING ? 'running' : g.state === SWAPPED ? 'swapped' : 'waiting',
        cachedPromptTokens: g.numCachedPromptTokens,
        seqs: g.seqs
          .filter((s) => s.live)
          .map((s) => ({
            seqId: s.id,
            index: s.index,
            numTokens: s.numTokens,
            numDropped: s.numDropped,
          })),
      });
    }
    return out;
  }

  /** Gauges and counters; cheap enough to call every step (O(live requests)). */
  metrics(): SchedulerMetrics {
    let numRunning = 0;
    let numWaiting = 0;
    let numSwapped = 0;
    let numPreemptedWaiting = 0;
    for (const g of this.requests.values()) {
      if (g.state === RUNNING) numRunning++;
      else if (g.state === SWAPPED) numSwapped++;
      else if (g.state === WAITING) {
        numWaiting++;
        if (g.numPreemptions > 0) numPreemptedWaiting++;
      }
    }
    const { planner, preemptor, requests } = this;
    const { hostSlots } = this.config;
    return {
      numRunning,
      numWaiting,
      numSwapped,
      numPreemptedWaiting,
      preemptionsRecompute: preemptor.preemptionsRecompute,
      preemptionsSwap: preemptor.preemptionsSwap,
      swapFallbacks: preemptor.swapFallbacks,
      prefixQueryTokens: planner.prefixQueryTokens,
      prefixHitTokens: planner.prefixHitTokens,
      recomputeHitTokens: planner.recomputeHitTokens,
      steps: this.stepNo,
      lastStepTokens: this.lastStepTokens,
      tokenBudget: this.maxNumBatchedTokens,
      meanBudgetUse: this.stepNo === 0 ? 0 : this.budgetUseSum / this.stepNo,
      finished: requests.numFinished,
      aborted: requests.numAborted,
      rejected: requests.numRejected,
      hostSlotsUsed: hostSlots.numUsed,
      hostSlotsTotal: hostSlots.capacity,
      kvCompression: this.compressor.metrics(requests.values()),
    };
  }
}
