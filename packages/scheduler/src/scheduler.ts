import type { BlockCopy, CachedPrefix, ExtraKeys, KvCacheManager } from '@kvasir/kv-allocator';
import { SchedulerError } from './errors';
import { HostSlotPool } from './host-slots';
import {
  fcfsPolicy,
  lowestPriorityLatestArrival,
  type PreemptionPolicy,
  type QueueContext,
  type QueuedRequest,
  type QueuePolicy,
  type RunningRequest,
  validatePreemptionPolicy,
  validateQueuePolicy,
} from './policies';
import type {
  BatchPlan,
  FinishReason,
  PlanRow,
  PreemptionMode,
  RequestOutput,
  SchedulerEvent,
  SchedulerMetrics,
  SchedulerRequest,
  SequenceOutput,
  StepResult,
  SwapTransfer,
} from './types';
import { validateRequest } from './validate';

/** Options of `Scheduler`. */
export interface SchedulerOptions {
  /** The paged KV allocator the scheduler takes blocks from (it owns the sequences in it). */
  readonly kvCache: KvCacheManager;
  /** Longest sequence (prompt + generated) the model accepts. */
  readonly maxModelLen: number;
  /** Sequences (rows) per step. Default 256. */
  readonly maxNumSeqs?: number;
  /** Tokens per step (the token budget). Default 2048. */
  readonly maxNumBatchedTokens?: number;
  /** Split long prompts into chunks over several steps. Default true. */
  readonly enableChunkedPrefill?: boolean;
  /**
   * Most prompt tokens one sequence may take in a step, so one long prompt cannot take the
   * whole budget. Default `maxNumBatchedTokens` (no cap).
   */
  readonly longPrefillTokenThreshold?: number;
  /** Look up cached prefixes on admission. Default: the allocator's `enablePrefixCaching`. */
  readonly enablePrefixCaching?: boolean;
  /** What preemption does. Default 'recompute'. */
  readonly preemptionMode?: PreemptionMode;
  /** Host slots (one block each) available to swap preemption. Default 0. */
  readonly hostSwapBlocks?: number;
  /** Order of the waiting queue. Default FCFS. */
  readonly queuePolicy?: QueuePolicy;
  /** Victim choice. Default lowest priority, then latest arrival. */
  readonly preemptionPolicy?: PreemptionPolicy;
  /** End-of-sequence token for requests that do not set their own. */
  readonly eosTokenId?: number;
  /**
   * Fraction of the cache kept free when admitting new requests, so running ones can grow a
   * while before anything must be preempted (vLLM v0's watermark). Default 0.01.
   */
  readonly admissionWatermark?: number;
  /** Time source for arrival, aging and latency. Default: the step counter. */
  readonly clock?: () => number;
  /** Called synchronously for every event. */
  readonly onEvent?: (event: SchedulerEvent) => void;
}

const WAITING = 0;
const RUNNING = 1;
const SWAPPED = 2;
const FINISHED = 3;
type GroupState = typeof WAITING | typeof RUNNING | typeof SWAPPED | typeof FINISHED;

const EMPTY_PREFIX: CachedPrefix = Object.freeze({ numTokens: 0, blocks: [], hashes: [] });

class Seq {
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
  /** Planning scratch for the current step. */
  chunk = 0;
  prefix: CachedPrefix = EMPTY_PREFIX;
  updateStamp = 0;

  constructor(
    readonly id: number,
    readonly index: number,
    readonly group: Group,
    tokens: Int32Array,
    numTokens: number,
  ) {
    this.tokens = tokens;
    this.numTokens = numTokens;
  }

  get live(): boolean {
    return this.finishReason === undefined;
  }

  get numOutputTokens(): number {
    return this.numTokens - this.group.numPromptTokens;
  }

  append(token: number, maxModelLen: number): void {
    if (this.numTokens === this.tokens.length) {
      const grown = new Int32Array(
        Math.max(this.numTokens + 1, Math.min(maxModelLen + 1, this.tokens.length * 2)),
      );
      grown.set(this.tokens);
      this.tokens = grown;
    }
    this.tokens[this.numTokens++] = token;
  }
}

class Group implements QueuedRequest, RunningRequest {
  state: GroupState = WAITING;
  seqs: Seq[] = [];
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
  nextIndex = 1;
  capacityReason: string | undefined = undefined;
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
    for (const s of this.seqs) if (s.live) t += s.numComputed;
    return t;
  }
  get numSeqs(): number {
    let n = 0;
    for (const s of this.seqs) if (s.live) n++;
    return n;
  }
}

interface Entry {
  seq: Seq;
  start: number;
  len: number;
  slots: Int32Array;
  /** Sequences sampling from this row's logits (the row's own, plus freshly forked children). */
  samples: Seq[] | null;
}

interface StepState {
  step: number;
  budget: number;
  seqBudget: number;
  entries: Entry[];
  copies: BlockCopy[];
  swapOut: SwapTransfer[];
  swapIn: SwapTransfer[];
  preempted: boolean;
}

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
  private readonly hostSlots: HostSlotPool;
  private readonly queuePolicy: QueuePolicy;
  private readonly preemptionPolicy: PreemptionPolicy;
  private readonly eosTokenId: number | undefined;
  private readonly clockFn: (() => number) | undefined;
  private readonly onEvent: ((event: SchedulerEvent) => void) | undefined;
  private readonly blockSize: number;
  private readonly watermarkBlocks: number;

  private readonly groups = new Map<string, Group>();
  private readonly seqById = new Map<number, Seq>();
  private running: Group[] = [];
  private waiting: Group[] = [];
  private swapped: Group[] = [];
  private finishedOutputs: RequestOutput[] = [];
  private deferredHostSlots: number[] = [];
  private nextSeqId = 1;
  private nextArrivalIndex = 0;
  private stepNo = 0;
  private updateNo = 0;

  private preemptionsRecompute = 0;
  private preemptionsSwap = 0;
  private swapFallbacks = 0;
  private prefixQueryTokens = 0;
  private prefixHitTokens = 0;
  private recomputeHitTokens = 0;
  private lastStepTokens = 0;
  private budgetUseSum = 0;
  private numFinished = 0;
  private numAborted = 0;
  private numRejected = 0;

  /** @throws {SchedulerError} INVALID_CONFIG for a bad option, naming it. */
  constructor(options: SchedulerOptions) {
    const o = options;
    const kv = o?.kvCache;
    if (!kv || typeof kv.allocateSlots !== 'function' || typeof kv.blockTable !== 'function') {
      throw new SchedulerError('INVALID_CONFIG', 'kvCache must be a KvCacheManager');
    }
    const int = (name: string, v: number, min: number): number => {
      if (!Number.isInteger(v) || v < min) {
        throw new SchedulerError(
          'INVALID_CONFIG',
          `${name} must be an integer ≥ ${min}, got ${String(v)}`,
          { details: { [name]: v } },
        );
      }
      return v;
    };
    this.kvCache = kv;
    this.blockSize = kv.blockSize;
    this.maxModelLen = int('maxModelLen', o.maxModelLen, 1);
    this.maxNumSeqs = int('maxNumSeqs', o.maxNumSeqs ?? 256, 1);
    this.maxNumBatchedTokens = int('maxNumBatchedTokens', o.maxNumBatchedTokens ?? 2048, 1);
    this.enableChunkedPrefill = o.enableChunkedPrefill ?? true;
    this.longPrefillTokenThreshold = int(
      'longPrefillTokenThreshold',
      o.longPrefillTokenThreshold ?? this.maxNumBatchedTokens,
      1,
    );
    if (!this.enableChunkedPrefill && this.maxNumBatchedTokens < this.maxModelLen) {
      throw new SchedulerError(
        'INVALID_CONFIG',
        `without chunked prefill maxNumBatchedTokens (${this.maxNumBatchedTokens}) must be ≥ maxModelLen (${this.maxModelLen}), or long prompts could never run`,
      );
    }
    this.enablePrefixCaching = (o.enablePrefixCaching ?? true) && kv.enablePrefixCaching;
    const mode = o.preemptionMode ?? 'recompute';
    if (mode !== 'recompute' && mode !== 'swap') {
      throw new SchedulerError('INVALID_CONFIG', `unknown preemptionMode ${String(mode)}`);
    }
    this.preemptionMode = mode;
    const wm = o.admissionWatermark ?? 0.01;
    if (!(wm >= 0 && wm < 1)) {
      throw new SchedulerError('INVALID_CONFIG', `admissionWatermark must be in [0, 1), got ${wm}`);
    }
    this.watermarkBlocks = Math.floor(wm * kv.numBlocks);
    this.hostSlots = new HostSlotPool(o.hostSwapBlocks ?? 0);
    this.queuePolicy = validateQueuePolicy(o.queuePolicy ?? fcfsPolicy());
    this.preemptionPolicy = validatePreemptionPolicy(
      o.preemptionPolicy ?? lowestPriorityLatestArrival(),
    );
    if (o.eosTokenId !== undefined) int('eosTokenId', o.eosTokenId, 0);
    this.eosTokenId = o.eosTokenId;
    this.clockFn = o.clock;
    this.onEvent = o.onEvent;
  }

  private now(): number {
    return this.clockFn ? this.clockFn() : this.stepNo;
  }

  /**
   * Queues a request. One whose prompt alone needs more blocks than the whole cache ends at
   * once with finish reason 'rejected' (delivered by the next `update()`), instead of being
   * preempted and resumed forever.
   * @throws {SchedulerError} INVALID_REQUEST (bad field, named in the message) or
   *   DUPLICATE_REQUEST; nothing changes.
   */
  add(request: SchedulerRequest): void {
    validateRequest(request, {
      maxModelLen: this.maxModelLen,
      maxNumSeqs: this.maxNumSeqs,
      maxNumBatchedTokens: this.maxNumBatchedTokens,
    });
    if (this.groups.has(request.id)) {
      throw new SchedulerError('DUPLICATE_REQUEST', `request ${request.id} is already queued`, {
        details: { requestId: request.id },
      });
    }
    const promptLen = request.promptTokenIds.length;
    const g = new Group(
      request,
      this.nextArrivalIndex++,
      request.arrivalTime ?? this.now(),
      request.priority ?? 0,
      promptLen,
      request.eosTokenId ?? this.eosTokenId,
      request.beamWidth ?? 1,
    );
    const cap = Math.min(this.maxModelLen + 1, promptLen + Math.min(request.maxTokens, 64));
    const tokens = new Int32Array(Math.max(cap, promptLen + 1));
    for (let i = 0; i < promptLen; i++) tokens[i] = request.promptTokenIds[i]!;
    const seq = new Seq(this.nextSeqId++, 0, g, tokens, promptLen);
    g.seqs.push(seq);
    this.groups.set(request.id, g);
    this.seqById.set(seq.id, seq);

    const promptBlocks = Math.ceil(promptLen / this.blockSize);
    if (promptBlocks > this.kvCache.numBlocks) {
      this.finishGroup(
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
    const g = this.groups.get(requestId);
    if (!g || g.state === FINISHED) return undefined;
    return this.finishGroup(g, 'abort', undefined, false, options.keepCached ?? true);
  }

  /** True while any request is waiting, running or swapped out. */
  hasUnfinished(): boolean {
    return this.groups.size > 0;
  }

  /** Live requests. */
  get numUnfinished(): number {
    return this.groups.size;
  }

  /** Plans the next step. Never throws for a valid state; an empty plan means nothing to run. */
  schedule(): BatchPlan {
    this.releaseDeferredHostSlots();
    const step = ++this.stepNo;
    const st: StepState = {
      step,
      budget: this.maxNumBatchedTokens,
      seqBudget: this.maxNumSeqs,
      entries: [],
      copies: [],
      swapOut: [],
      swapIn: [],
      preempted: false,
    };
    // Most important first, so the least important are still unscheduled (and preemptible)
    // when blocks run out.
    this.running = this.running.filter((g) => g.state === RUNNING).sort(byImportance);
    for (let phase = 0; phase < 2; phase++) {
      for (let i = 0; i < this.running.length; i++) {
        const g = this.running[i]!;
        if (g.state !== RUNNING || g.scheduledStep === step) continue;
        if (isDecodeGroup(g) !== (phase === 0)) continue;
        this.scheduleRunning(g, st, true);
      }
    }
    this.running = this.running.filter((g) => g.state === RUNNING);
    if (!st.preempted) this.swapIn(st);
    this.swapped = this.swapped.filter((g) => g.state === SWAPPED);
    if (!st.preempted && this.swapped.length === 0) this.admitWaiting(st);
    this.waiting = this.waiting.filter((g) => g.state === WAITING);
    return this.buildPlan(st);
  }

  private releaseDeferredHostSlots(): void {
    for (const slot of this.deferredHostSlots) this.hostSlots.release(slot);
    this.deferredHostSlots.length = 0;
  }

  private scheduleRunning(g: Group, st: StepState, allowPreempt: boolean): void {
    for (;;) {
      if (!this.planChunks(g, st)) return;
      const needed = this.blocksNeeded(g);
      if (needed <= this.kvCache.numAvailableBlocks()) {
        this.allocate(g, st);
        return;
      }
      if (!allowPreempt) return;
      const held = this.heldBlocks(g);
      if (held + needed > this.kvCache.numBlocks) {
        this.finishGroup(
          g,
          'length',
          `KV cache full: the request needs ${held + needed} blocks, the cache has ${this.kvCache.numBlocks}`,
        );
        return;
      }
      const victim = this.chooseVictim(st.step);
      if (victim === g && !this.running.some((r) => r !== g && r.state === RUNNING)) {
        // Alone and still short of blocks: preempting itself would only repeat forever.
        this.finishGroup(
          g,
          'length',
          `KV cache full: the request alone needs more than the cache's ${this.kvCache.numBlocks} blocks`,
        );
        return;
      }
      this.preempt(victim, st);
      if (victim === g) return;
    }
  }

  private chooseVictim(step: number): Group {
    const candidates: Group[] = [];
    for (const r of this.running) {
      if (r.state === RUNNING && r.scheduledStep !== step) candidates.push(r);
    }
    const id = this.preemptionPolicy.chooseVictim(candidates);
    const victim = candidates.find((c) => c.requestId === id);
    if (!victim) {
      throw new SchedulerError(
        'INVALID_POLICY',
        `preemption policy ${this.preemptionPolicy.name} chose ${JSON.stringify(id)}, which is not one of the ${candidates.length} candidates`,
      );
    }
    return victim;
  }

  /**
   * Sets each live sequence's `chunk` (and `prefix` for sequences not in the allocator) for
   * this step. False when the group cannot run now (budget, rows, or whole-prompt rule).
   */
  private planChunks(g: Group, st: StepState): boolean {
    let rows = 0;
    let tokens = 0;
    // Beams are compared with each other every step, so after a recompute their prefills hold
    // back the last token until every beam can compute it in the same step.
    const lockstep = g.beamWidth > 1 && g.numSeqs > 1;
    let synced = true;
    if (lockstep) {
      for (const s of g.seqs) {
        if (s.live && !(s.allocated && s.numTokens - s.numComputed === 1)) synced = false;
      }
    }
    // Decodes of a group run together: all or none, and before the group's own prefill chunks
    // take the budget.
    for (const s of g.seqs) {
      s.chunk = 0;
      if (!s.live || !s.allocated || s.numTokens - s.numComputed !== 1) continue;
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
      if (!s.allocated && startedOne && this.enablePrefixCaching) continue;
      if (!s.allocated) this.lookupPrefix(s, lockstep ? 2 : 1);
      const start = s.allocated ? s.numComputed : s.prefix.numTokens;
      const need = s.numTokens - start;
      if (need <= 0 || rows >= st.seqBudget || (lockstep && need === 1)) continue;
      let chunk = Math.min(need, this.longPrefillTokenThreshold, st.budget - tokens);
      if (lockstep) chunk = Math.min(chunk, need - 1);
      if (!this.enableChunkedPrefill && chunk < need && !lockstep) chunk = 0;
      if (chunk <= 0) continue;
      s.chunk = chunk;
      tokens += chunk;
      rows++;
      if (!s.allocated) startedOne = true;
    }
    return rows > 0;
  }

  /** `keep`: tokens at the end that must be computed (1: the last, whose logits are needed). */
  private lookupPrefix(s: Seq, keep: number): void {
    s.prefix = EMPTY_PREFIX;
    if (!this.enablePrefixCaching || s.group.req.skipPrefixCache) return;
    const p = this.kvCache.findCachedPrefix(
      s.tokens.subarray(0, s.numTokens),
      s.group.req.extraKeys,
    );
    const maxBlocks = Math.max(0, Math.floor((s.numTokens - keep) / this.blockSize));
    if (p.blocks.length <= maxBlocks) {
      s.prefix = p;
    } else {
      s.prefix = {
        numTokens: maxBlocks * this.blockSize,
        blocks: p.blocks.slice(0, maxBlocks),
        hashes: p.hashes.slice(0, maxBlocks),
      };
    }
  }

  private blocksNeeded(g: Group): number {
    let n = 0;
    for (const s of g.seqs) {
      if (s.chunk > 0) {
        n += this.kvCache.numBlocksToAllocate(s.id, s.chunk, s.allocated ? undefined : s.prefix);
      }
    }
    return n;
  }

  /**
   * Blocks the group's live sequences need at their current lengths. With prefix caching the
   * full blocks of the tokens they all start with (a parallel-sampling group's prompt) are
   * shared, so they count once.
   */
  private groupBlocksBound(g: Group): number {
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
    const shared = this.enablePrefixCaching ? Math.floor(common / this.blockSize) : 0;
    let total = shared;
    for (const s of live) total += Math.ceil(s.numTokens / this.blockSize) - shared;
    return total;
  }

  private heldBlocks(g: Group): number {
    const seen = new Set<number>();
    for (const s of g.seqs) {
      if (s.allocated) for (const b of this.kvCache.blockTable(s.id)) seen.add(b);
    }
    return seen.size;
  }

  /** Allocates the planned chunks; stops at the first sequence the pool cannot serve. */
  private allocate(g: Group, st: StepState): number {
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
      const entry: Entry = { seq: s, start, len: s.chunk, slots: res.slotMapping, samples: null };
      if (s.numComputed === s.numTokens) {
        entry.samples = [s];
        if (g.pendingForks > 0 && s.index === 0) this.forkChildren(g, s, entry.samples);
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

  private forkChildren(g: Group, parent: Seq, samples: Seq[]): void {
    while (g.pendingForks > 0) {
      g.pendingForks--;
      const child = new Seq(
        this.nextSeqId++,
        g.nextIndex++,
        g,
        parent.tokens.slice(),
        parent.numTokens,
      );
      this.kvCache.fork(parent.id, child.id);
      child.allocated = true;
      child.numComputed = parent.numComputed;
      g.seqs.push(child);
      this.seqById.set(child.id, child);
      samples.push(child);
    }
  }

  private preempt(g: Group, st: StepState): void {
    st.preempted = true;
    g.numPreemptions++;
    let mode = this.preemptionMode;
    let fellBack = false;
    if (mode === 'swap') {
      const distinct = this.heldBlocks(g);
      if (distinct > this.hostSlots.numFree) {
        mode = 'recompute';
        fellBack = true;
        this.swapFallbacks++;
      }
    }
    if (mode === 'swap') {
      const slotOf = new Map<number, number>();
      for (const s of g.seqs) {
        if (!s.live || !s.allocated) continue;
        const table = this.kvCache.blockTable(s.id);
        const slots = new Int32Array(table.length);
        for (let i = 0; i < table.length; i++) {
          const b = table[i]!;
          let slot = slotOf.get(b);
          if (slot === undefined) {
            slot = this.hostSlots.allocate();
            slotOf.set(b, slot);
            g.hostSlotList.push(slot);
            st.swapOut.push({ gpuBlock: b, hostSlot: slot, requestId: g.req.id });
          }
          slots[i] = slot;
        }
        s.hostSlots = slots;
        this.kvCache.free(s.id);
        s.allocated = false;
      }
      g.state = SWAPPED;
      this.swapped.push(g);
      this.preemptionsSwap++;
    } else {
      for (const s of g.seqs) {
        if (s.allocated) this.kvCache.free(s.id);
        s.allocated = false;
        s.numComputed = 0;
        s.prefix = EMPTY_PREFIX;
      }
      g.state = WAITING;
      this.waiting.push(g);
      this.preemptionsRecompute++;
    }
    this.emit({
      type: 'preempt',
      requestId: g.req.id,
      mode,
      fellBackToRecompute: fellBack,
      step: st.step,
    });
  }

  private swapIn(st: StepState): void {
    for (const g of this.swapped) {
      if (g.state !== SWAPPED) continue;
      let rows = 0;
      let needed = 0;
      for (const s of g.seqs) {
        if (!s.live || !s.hostSlots) continue;
        rows++;
        // Without prefix hits, as an upper bound: swapped tokens plus the next token.
        needed += Math.ceil((s.numComputed + 1) / this.blockSize);
      }
      if (rows > st.seqBudget) return;
      if (needed > this.kvCache.numAvailableBlocks()) {
        // The bound ignores sharing (forked sequences come back as separate copies). When
        // nothing else runs, waiting longer cannot help: recompute instead.
        if (this.running.length === 0 || needed > this.kvCache.numBlocks) {
          this.swapToRecompute(g);
          continue;
        }
        return;
      }
      for (const s of g.seqs) {
        if (!s.live || !s.hostSlots) continue;
        const computed = s.tokens.subarray(0, s.numComputed);
        let prefix = EMPTY_PREFIX;
        if (this.enablePrefixCaching) {
          // Blocks still cached on the GPU need no transfer.
          prefix = this.kvCache.findCachedPrefix(computed, g.req.extraKeys);
        }
        const res = this.kvCache.allocateSlots(s.id, computed.subarray(prefix.numTokens), {
          prefix,
          extraKeys: g.req.extraKeys,
        });
        if (!res.ok) throw new Error('unreachable: swap-in was checked against free blocks');
        const table = this.kvCache.blockTable(s.id);
        for (let i = prefix.blocks.length; i < table.length; i++) {
          st.swapIn.push({ gpuBlock: table[i]!, hostSlot: s.hostSlots[i]!, requestId: g.req.id });
        }
        s.hostSlots = null;
        s.allocated = true;
      }
      // Released next step: a swap-out in this same plan must not overwrite them before
      // the swap-in reads them.
      for (const slot of g.hostSlotList) this.deferredHostSlots.push(slot);
      g.hostSlotList = [];
      g.state = RUNNING;
      this.running.push(g);
      this.emit({ type: 'swap-in', requestId: g.req.id, step: st.step });
      this.scheduleRunning(g, st, false);
    }
  }

  private swapToRecompute(g: Group): void {
    for (const slot of g.hostSlotList) this.hostSlots.release(slot);
    g.hostSlotList = [];
    for (const s of g.seqs) {
      s.hostSlots = null;
      s.numComputed = 0;
    }
    g.state = WAITING;
    this.waiting.push(g);
  }

  private admitWaiting(st: StepState): void {
    if (this.waiting.length === 0) return;
    const order = this.orderWaiting();
    for (const g of order) {
      if (st.budget <= 0 || st.seqBudget <= 0) return;
      if (g.state !== WAITING) continue;
      if (!this.planChunks(g, st)) return;
      const needed = this.blocksNeeded(g);
      const idle = this.running.length === 0 && this.swapped.length === 0;
      const reserve = idle ? 0 : this.watermarkBlocks;
      if (needed + reserve > this.kvCache.numAvailableBlocks()) {
        if (idle) {
          // Nothing else holds blocks: this request alone exceeds the cache.
          const total = this.groupBlocksBound(g);
          if (total > this.kvCache.numBlocks) {
            this.finishGroup(
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
      if (this.allocate(g, st) === 0) return;
      g.state = RUNNING;
      this.running.push(g);
    }
  }

  /** Sorts the waiting queue in place by policy rank (nearly sorted between steps: cheap). */
  private orderWaiting(): Group[] {
    const list = this.waiting;
    if (list.length <= 1) return list;
    let cache: Map<Group, number> | undefined;
    const ctx: QueueContext = {
      now: this.now(),
      queueLength: list.length,
      cachedPrefixTokens: (req) => {
        const g = req as Group;
        cache ??= new Map();
        let v = cache.get(g);
        if (v === undefined) {
          const s = g.seqs[0]!;
          v = this.enablePrefixCaching
            ? this.kvCache.findCachedPrefix(s.tokens.subarray(0, s.numTokens), g.req.extraKeys)
                .numTokens
            : 0;
          cache.set(g, v);
        }
        return v;
      },
    };
    for (const g of list) g.rank = g.state === WAITING ? this.queuePolicy.rank(g, ctx) : 0;
    list.sort((a, b) => a.rank - b.rank || a.arrivalIndex - b.arrivalIndex);
    return list;
  }

  private buildPlan(st: StepState): BatchPlan {
    const entries = st.entries;
    const numRows = entries.length;
    let numTokens = 0;
    let numSamples = 0;
    let maxBlocks = 0;
    let numPrefillTokens = 0;
    for (const e of entries) {
      numTokens += e.len;
      if (e.samples) numSamples += e.samples.length;
      const nb = Math.ceil((e.start + e.len) / this.blockSize);
      if (nb > maxBlocks) maxBlocks = nb;
    }
    const tokenIds = new Int32Array(numTokens);
    const positions = new Int32Array(numTokens);
    const slotMapping = new Int32Array(numTokens);
    const queryStartLoc = new Int32Array(numRows + 1);
    const contextLens = new Int32Array(numRows);
    const blockTables = new Uint32Array(numRows * maxBlocks);
    const logitsIndices = new Int32Array(numSamples);
    const sampleSeqIds = new Int32Array(numSamples);
    const sampleRows = new Int32Array(numSamples);
    const sampleIndices = new Int32Array(numSamples);
    const rows: PlanRow[] = [];
    let t = 0;
    let k = 0;
    for (let r = 0; r < numRows; r++) {
      const e = entries[r]!;
      const s = e.seq;
      queryStartLoc[r] = t;
      tokenIds.set(s.tokens.subarray(e.start, e.start + e.len), t);
      slotMapping.set(e.slots, t);
      for (let i = 0; i < e.len; i++) positions[t + i] = e.start + i;
      const ctxLen = e.start + e.len;
      contextLens[r] = ctxLen;
      const table = this.kvCache.blockTable(s.id);
      const base = r * maxBlocks;
      for (let i = 0; i < table.length; i++) blockTables[base + i] = table[i]!;
      const isPrefill = e.len > 1 || e.start < s.group.numPromptTokens;
      if (isPrefill) numPrefillTokens += e.len;
      rows.push({
        seqId: s.id,
        requestId: s.group.req.id,
        index: s.index,
        queryStart: t,
        queryLen: e.len,
        contextLen: ctxLen,
        isPrefill,
        blockTable: blockTables.subarray(base, base + table.length),
      });
      t += e.len;
      if (e.samples) {
        for (const x of e.samples) {
          logitsIndices[k] = t - 1;
          sampleSeqIds[k] = x.id;
          sampleRows[k] = r;
          sampleIndices[k] = x.index;
          k++;
        }
      }
    }
    queryStartLoc[numRows] = t;
    this.lastStepTokens = numTokens;
    this.budgetUseSum += numTokens / this.maxNumBatchedTokens;
    this.emit({
      type: 'step',
      step: st.step,
      numTokens,
      tokenBudget: this.maxNumBatchedTokens,
      numRows,
      maxNumSeqs: this.maxNumSeqs,
    });
    return {
      step: st.step,
      numTokens,
      numPrefillTokens,
      numDecodeTokens: numTokens - numPrefillTokens,
      tokenIds,
      positions,
      slotMapping,
      rows,
      queryStartLoc,
      contextLens,
      blockTables,
      maxBlocksPerSeq: maxBlocks,
      logitsIndices,
      sampleSeqIds,
      sampleRows,
      sampleIndices,
      copies: st.copies,
      swapOut: st.swapOut,
      swapIn: st.swapIn,
      tokenBudget: this.maxNumBatchedTokens,
    };
  }

  /**
   * Appends the sampled tokens, applies stop conditions (stop token ids, EOS unless ignored,
   * max tokens, maxModelLen) and frees finished sequences. Samples of requests that ended
   * meanwhile (aborted) are ignored. Returns every request that ended since the last call
   * (finished, or rejected), except aborts, which `abort()` returned.
   * @throws {SchedulerError} INVALID_RESULT for misaligned arrays, a bad token id, a sequence
   *   that was not waiting for a token, or missing beam candidates; nothing changes then.
   */
  update(result: StepResult = { seqIds: [], tokenIds: [] }): RequestOutput[] {
    // The plan that swapped these in has run by now.
    this.releaseDeferredHostSlots();
    const stamp = ++this.updateNo;
    const n = result.seqIds.length;
    const bad = (msg: string): never => {
      throw new SchedulerError('INVALID_RESULT', msg);
    };
    if (result.tokenIds.length !== n) bad('seqIds and tokenIds differ in length');
    if (result.logprobs && result.logprobs.length !== n) bad('logprobs must align with seqIds');
    const beam = result.beamCandidates;
    if (beam) {
      if (!Number.isInteger(beam.k) || beam.k < 1) bad('beamCandidates.k must be ≥ 1');
      if (beam.tokenIds.length !== n * beam.k || beam.logprobs.length !== n * beam.k) {
        bad('beamCandidates arrays must hold k entries per sample');
      }
    }
    for (let i = 0; i < n; i++) {
      const s = this.seqById.get(result.seqIds[i]!);
      if (!s?.live || s.group.state === FINISHED) continue;
      if (s.updateStamp === stamp) bad(`sequence ${s.id} sampled twice in one result`);
      s.updateStamp = stamp;
      if (s.group.state !== RUNNING || s.numComputed !== s.numTokens) {
        bad(`sequence ${s.id} of request ${s.group.req.id} was not waiting for a token`);
      }
      if (s.group.beamWidth > 1) {
        if (!beam) bad(`request ${s.group.req.id} uses beam search: beamCandidates required`);
        for (let j = 0; j < beam!.k; j++) {
          const tok = beam!.tokenIds[i * beam!.k + j]!;
          if (!Number.isInteger(tok) || tok < 0 || tok > 0x7fffffff) bad(`bad token id ${tok}`);
        }
      } else {
        const tok = result.tokenIds[i]!;
        if (!Number.isInteger(tok) || tok < 0 || tok > 0x7fffffff) bad(`bad token id ${tok}`);
      }
    }

    const now = this.now();
    let beamGroups: Map<Group, number[]> | undefined;
    for (let i = 0; i < n; i++) {
      const s = this.seqById.get(result.seqIds[i]!);
      if (!s?.live || s.updateStamp !== stamp) continue;
      const g = s.group;
      if (g.firstTokenTime === undefined) g.firstTokenTime = now;
      if (g.beamWidth > 1) {
        beamGroups ??= new Map();
        let list = beamGroups.get(g);
        if (!list) {
          list = [];
          beamGroups.set(g, list);
        }
        list.push(i);
        continue;
      }
      const tok = result.tokenIds[i]!;
      s.append(tok, this.maxModelLen);
      if (result.logprobs) s.cumLogprob += result.logprobs[i]!;
      const reason = this.stopReason(g, s, tok);
      if (reason) this.finishSeq(s, reason);
    }
    if (beamGroups) {
      for (const [g, idx] of beamGroups) this.stepBeams(g, idx, result);
    }
    const out = this.finishedOutputs;
    this.finishedOutputs = [];
    return out;
  }

  private stopReason(g: Group, s: Seq, tok: number): FinishReason | undefined {
    if (g.stopTokens.has(tok)) return 'stop';
    if (tok === g.eos && !g.req.ignoreEos) return 'stop';
    if (s.numOutputTokens >= g.req.maxTokens) return 'length';
    if (s.numTokens >= this.maxModelLen) return 'length';
    return undefined;
  }

  /** Beam search step: keep the `beamWidth` best continuations over all live beams. */
  private stepBeams(g: Group, idx: number[], result: StepResult): void {
    const beam = result.beamCandidates!;
    const k = beam.k;
    const cands: { seq: Seq; tok: number; score: number }[] = [];
    for (const i of idx) {
      const s = this.seqById.get(result.seqIds[i]!)!;
      for (let j = 0; j < k; j++) {
        cands.push({
          seq: s,
          tok: beam.tokenIds[i * k + j]!,
          score: s.cumLogprob + beam.logprobs[i * k + j]!,
        });
      }
    }
    // Ties break by beam index, not global ids, so results do not depend on scheduling.
    cands.sort((a, b) => b.score - a.score || a.seq.index - b.seq.index || a.tok - b.tok);
    // Beams not sampled in this result (after recompute, a group's prefills may land in
    // different steps) keep their places in the width.
    let waitingBeams = 0;
    for (const s of g.seqs) if (s.live && s.updateStamp !== this.updateNo) waitingBeams++;
    const width = g.beamWidth - waitingBeams;
    const chosen: { seq: Seq; tok: number; score: number }[] = [];
    for (const c of cands) {
      if (chosen.length + g.finishedBeams.length >= width) break;
      const isEnd = g.stopTokens.has(c.tok) || (c.tok === g.eos && !g.req.ignoreEos);
      if (isEnd) {
        const out = new Int32Array(c.seq.numOutputTokens + 1);
        out.set(c.seq.tokens.subarray(g.numPromptTokens, c.seq.numTokens));
        out[out.length - 1] = c.tok;
        g.finishedBeams.push({
          index: 0,
          tokenIds: out,
          finishReason: 'stop',
          cumulativeLogprob: c.score,
        });
      } else {
        chosen.push(c);
      }
    }
    // Forks come first (they copy the parent's state before it changes), then pruning, then
    // appends.
    const uses = new Map<Seq, number>();
    const targets: Seq[] = [];
    for (const c of chosen) {
      const u = uses.get(c.seq) ?? 0;
      uses.set(c.seq, u + 1);
      if (u === 0) {
        targets.push(c.seq);
      } else {
        const child = new Seq(
          this.nextSeqId++,
          g.nextIndex++,
          g,
          c.seq.tokens.slice(),
          c.seq.numTokens,
        );
        this.kvCache.fork(c.seq.id, child.id);
        child.allocated = true;
        child.numComputed = c.seq.numComputed;
        child.cumLogprob = c.seq.cumLogprob;
        g.seqs.push(child);
        this.seqById.set(child.id, child);
        targets.push(child);
      }
    }
    for (const i of idx) {
      const s = this.seqById.get(result.seqIds[i]!)!;
      if (!uses.has(s)) this.dropSeq(s);
    }
    for (let j = 0; j < chosen.length; j++) {
      const s = targets[j]!;
      s.append(chosen[j]!.tok, this.maxModelLen);
      s.cumLogprob = chosen[j]!.score;
    }
    const anyLive = g.seqs.some((s) => s.live);
    const done =
      g.finishedBeams.length >= g.beamWidth ||
      !anyLive ||
      g.seqs.some(
        (s) => s.live && (s.numOutputTokens >= g.req.maxTokens || s.numTokens >= this.maxModelLen),
      );
    if (done) {
      if (!anyLive) this.finishGroup(g, 'stop', undefined);
      else for (const s of g.seqs) if (s.live) this.finishSeq(s, 'length');
    }
  }

  /** A pruned beam: its blocks go back and it is no output. */
  private dropSeq(s: Seq): void {
    if (s.allocated) this.kvCache.free(s.id);
    s.allocated = false;
    s.finishReason = 'abort';
    this.seqById.delete(s.id);
    s.group.seqs = s.group.seqs.filter((x) => x !== s);
  }

  private finishSeq(s: Seq, reason: FinishReason): void {
    s.finishReason = reason;
    if (s.allocated) this.kvCache.free(s.id);
    s.allocated = false;
    const g = s.group;
    if (g.seqs.every((x) => !x.live) && g.pendingForks === 0) {
      this.finishGroup(g, g.seqs[0]!.finishReason!, undefined);
    }
  }

  private finishGroup(
    g: Group,
    reason: FinishReason,
    detail: string | undefined,
    queue = true,
    keepCached = true,
  ): RequestOutput {
    for (const s of g.seqs) {
      if (s.allocated) this.kvCache.free(s.id, { keepCached });
      s.allocated = false;
      if (s.live) s.finishReason = reason;
      s.hostSlots = null;
      this.seqById.delete(s.id);
    }
    for (const slot of g.hostSlotList) this.hostSlots.release(slot);
    g.hostSlotList = [];
    g.state = FINISHED;
    this.groups.delete(g.req.id);
    let outputs: SequenceOutput[];
    if (g.beamWidth > 1) {
      const all: SequenceOutput[] = [...g.finishedBeams];
      for (const s of g.seqs) {
        all.push({
          index: 0,
          tokenIds: s.tokens.slice(g.numPromptTokens, s.numTokens),
          finishReason: s.finishReason!,
          cumulativeLogprob: s.cumLogprob,
        });
      }
      all.sort((a, b) => b.cumulativeLogprob - a.cumulativeLogprob);
      outputs = all.slice(0, g.beamWidth).map((o, index) => ({ ...o, index }));
      if ((reason === 'stop' || reason === 'length') && outputs[0]) {
        reason = outputs[0].finishReason;
      }
    } else {
      outputs = g.seqs
        .slice()
        .sort((a, b) => a.index - b.index)
        .map((s) => ({
          index: s.index,
          tokenIds: s.tokens.slice(g.numPromptTokens, s.numTokens),
          finishReason: s.finishReason!,
          cumulativeLogprob: s.cumLogprob,
        }));
    }
    const output: RequestOutput = {
      requestId: g.req.id,
      finishReason: reason,
      ...(detail !== undefined ? { reason: detail } : {}),
      outputs,
      numPromptTokens: g.numPromptTokens,
      numCachedPromptTokens: g.numCachedPromptTokens,
      numPreemptions: g.numPreemptions,
      arrivalTime: g.arrivalTime,
      firstTokenTime: g.firstTokenTime,
      finishTime: this.now(),
    };
    if (reason === 'abort') this.numAborted++;
    else if (reason === 'rejected') this.numRejected++;
    else this.numFinished++;
    if (queue) this.finishedOutputs.push(output);
    this.emit({ type: 'finish', output });
    return output;
  }

  private emit(e: SchedulerEvent): void {
    this.onEvent?.(e);
  }

  /** Gauges and counters; cheap enough to call every step (O(live requests)). */
  metrics(): SchedulerMetrics {
    let numRunning = 0;
    let numWaiting = 0;
    let numSwapped = 0;
    let numPreemptedWaiting = 0;
    for (const g of this.groups.values()) {
      if (g.state === RUNNING) numRunning++;
      else if (g.state === SWAPPED) numSwapped++;
      else if (g.state === WAITING) {
        numWaiting++;
        if (g.numPreemptions > 0) numPreemptedWaiting++;
      }
    }
    return {
      numRunning,
      numWaiting,
      numSwapped,
      numPreemptedWaiting,
      preemptionsRecompute: this.preemptionsRecompute,
      preemptionsSwap: this.preemptionsSwap,
      swapFallbacks: this.swapFallbacks,
      prefixQueryTokens: this.prefixQueryTokens,
      prefixHitTokens: this.prefixHitTokens,
      recomputeHitTokens: this.recomputeHitTokens,
      steps: this.stepNo,
      lastStepTokens: this.lastStepTokens,
      tokenBudget: this.maxNumBatchedTokens,
      meanBudgetUse: this.stepNo === 0 ? 0 : this.budgetUseSum / this.stepNo,
      finished: this.numFinished,
      aborted: this.numAborted,
      rejected: this.numRejected,
      hostSlotsUsed: this.hostSlots.numUsed,
      hostSlotsTotal: this.hostSlots.capacity,
    };
  }
}

function byImportance(a: Group, b: Group): number {
  return (
    a.priority - b.priority || a.arrivalTime - b.arrivalTime || a.arrivalIndex - b.arrivalIndex
  );
}

function isDecodeGroup(g: Group): boolean {
  for (const s of g.seqs) {
    if (s.live && s.allocated && s.numTokens - s.numComputed > 1) return false;
  }
  return true;
}
