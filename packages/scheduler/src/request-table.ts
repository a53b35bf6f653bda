// The live requests and their sequences, from `add` to their end: the one place sequences are
// created (forks included) and where a request's blocks and host slots are given back.
import type { KvCacheManager } from '@kvasir/kv-allocator';
import type { HostSlotPool } from './host-slots.js';
import { assembleRequestOutput } from './request-output.js';
import { FINISHED, Sequence, type SequenceGroup } from './request-state.js';
import type { FinishReason, RequestOutput, SchedulerEvent, SchedulerRequest } from './types.js';

/** Requests by id and sequences by allocator id; finished requests leave both at once. */
export class RequestTable {
  private readonly groups = new Map<string, SequenceGroup>();
  private readonly seqById = new Map<number, Sequence>();
  private nextSeqId = 1;
  private finishedOutputs: RequestOutput[] = [];
  numFinished = 0;
  numAborted = 0;
  numRejected = 0;

  constructor(
    private readonly kvCache: KvCacheManager,
    private readonly hostSlots: HostSlotPool,
    private readonly maxModelLen: number,
    private readonly now: () => number,
    private readonly emit: (e: SchedulerEvent) => void,
  ) {}

  /** Live requests. */
  get size(): number {
    return this.groups.size;
  }

  has(requestId: string): boolean {
    return this.groups.has(requestId);
  }

  get(requestId: string): SequenceGroup | undefined {
    return this.groups.get(requestId);
  }

  /** A live sequence by allocator id. */
  seq(seqId: number): Sequence | undefined {
    return this.seqById.get(seqId);
  }

  /** Every live request. */
  values(): IterableIterator<SequenceGroup> {
    return this.groups.values();
  }

  /** Registers a new request with its first sequence, the prompt (not yet in the allocator). */
  add(g: SequenceGroup, request: SchedulerRequest): void {
    const promptLen = g.numPromptTokens;
    // Room for a few generated tokens up front; `append` grows it up to maxModelLen.
    const cap = Math.min(this.maxModelLen + 1, promptLen + Math.min(request.maxTokens, 64));
    const tokens = new Int32Array(Math.max(cap, promptLen + 1));
    for (let i = 0; i < promptLen; i++) tokens[i] = request.promptTokenIds[i]!;
    const seq = new Sequence(this.nextSeqId++, 0, g, tokens, promptLen);
    g.seqs.push(seq);
    this.groups.set(request.id, g);
    this.seqById.set(seq.id, seq);
  }

  /**
   * A child of `parent` in the same group (parallel sample or beam): its tokens copied, its
   * blocks shared with the parent by reference count until either writes into a shared block
   * (copy-on-write in the allocator).
   */
  fork(parent: Sequence): Sequence {
    const g = parent.group;
    const child = new Sequence(
      this.nextSeqId++,
      g.nextIndex++,
      g,
      parent.tokens.slice(),
      parent.numTokens,
    );
    this.kvCache.fork(parent.id, child.id);
    child.allocated = true;
    child.numComputed = parent.numComputed;
    child.numDropped = parent.numDropped;
    child.kv = parent.kv?.clone() ?? null;
    child.cumLogprob = parent.cumLogprob;
    g.seqs.push(child);
    this.seqById.set(child.id, child);
    return child;
  }

  /** A pruned beam: its blocks go back and it is no output. */
  drop(s: Sequence): void {
    if (s.allocated) this.kvCache.free(s.id);
    s.allocated = false;
    s.finishReason = 'abort';
    this.seqById.delete(s.id);
    s.group.seqs = s.group.seqs.filter((x) => x !== s);
  }

  /** Ends one sequence; its group ends with the last of them (and no fork pending). */
  finishSeq(s: Sequence, reason: FinishReason): void {
    s.finishReason = reason;
    if (s.allocated) this.kvCache.free(s.id);
    s.allocated = false;
    const g = s.group;
    if (g.seqs.every((x) => !x.live) && g.pendingForks === 0) {
      this.finish(g, g.seqs[0]!.finishReason!, undefined);
    }
  }

  /**
   * Ends a request in any state: frees its blocks (`keepCached: false` keeps blocks only it
   * held out of the prefix cache) and host slots, and assembles its output, queued for the next
   * `takeFinished()` unless `queue` is false (abort returns it directly).
   */
  finish(
    g: SequenceGroup,
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
    const output = assembleRequestOutput(g, reason, detail, this.now());
    if (output.finishReason === 'abort') this.numAborted++;
    else if (output.finishReason === 'rejected') this.numRejected++;
    else this.numFinished++;
    if (queue) this.finishedOutputs.push(output);
    this.emit({ type: 'finish', output });
    return output;
  }

  /** Outputs of the requests that ended since the last call. */
  takeFinished(): RequestOutput[] {
    const out = this.finishedOutputs;
    this.finishedOutputs = [];
    return out;
  }
}
