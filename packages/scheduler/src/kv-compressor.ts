// The scheduler's side of token-level KV compression: limits on a compressed sequence's
// prefill chunks, the attention-mass buffers and key shifts a plan carries, and after each
// step the policy's choice applied through the allocator's `dropBlocks`.
import type { BlockCopy, KvCacheManager } from '@kvasir/kv-allocator';
import { SchedulerError } from './errors.js';
import type { KvCompressionPolicy, KvCompressionView } from './kv-compression/policy.js';
import type { Sequence, SequenceGroup } from './request-state.js';
import type { KeyShift, KvCompressionMetrics } from './types.js';

/** Default SnapKV-style observation window, in tokens. */
const DEFAULT_OBSERVATION = 16;

/** A planned row as the compressor sees it (`PlanEntry` extends it). */
export interface CompressedRow {
  readonly seq: Sequence;
  /** Sequences sampling from the row: the row's own and children forked off it this step. */
  samples: Sequence[] | null;
  /** Tokens in the cache before this row's tokens (its first position in 'cache' mode). */
  readonly cacheStart: number;
  readonly len: number;
  /** The row's attention-mass output, when its policy needs it this step. */
  mass: Float32Array | null;
  massQueries: number;
}

const observationOf = (p: KvCompressionPolicy) => p.observationWindow ?? DEFAULT_OBSERVATION;

/** Compression state shared by the planner and the facade; counts tokens dropped per policy. */
export class KvCompressor {
  private readonly blockSize: number;
  private readonly dropped = new Map<string, number>();

  constructor(
    private readonly kvCache: KvCacheManager,
    private readonly maxModelLen: number,
  ) {
    this.blockSize = kvCache.blockSize;
  }

  /** Whether the policy compresses this sequence's prefill between chunks now. */
  private streams(s: Sequence, start: number): boolean {
    const policy = s.group.req.kvCompression!.policy;
    return policy.attention !== 'prefill-end' || start >= s.group.numPromptTokens;
  }

  /**
   * Most blocks a compressed sequence holds during a step: what the policy keeps plus one
   * prefill chunk (at most the policy's budget) and a filling block; a 'prefill-end' policy's
   * prompt must fit whole besides.
   */
  peakBlocks(g: SequenceGroup): number {
    const spec = g.req.kvCompression!;
    const keep = g.keepBlocks;
    let peak = 2 * keep + 1;
    if (spec.policy.attention === 'prefill-end') {
      peak = Math.max(peak, Math.ceil(g.numPromptTokens / this.blockSize) + 1);
    }
    return peak;
  }

  /** Cached prefix blocks an unallocated compressed sequence may adopt. */
  prefixBlockCap(s: Sequence): number {
    const spec = s.group.req.kvCompression;
    if (!spec || !this.streams(s, 0)) return Number.POSITIVE_INFINITY;
    return s.group.keepBlocks;
  }

  /**
   * The prefill chunk a compressed sequence may take this step, from the planner's `proposed`:
   * at most the policy's budget (so a long prompt streams through a bounded cache) and, in
   * 'cache' mode, no position past the model's context. A 'prefill-end' policy's prompt is
   * computed whole, its last chunk holding the observation window. 0: not this step.
   */
  adjustChunk(s: Sequence, start: number, proposed: number, maxPerStep: number): number {
    const spec = s.group.req.kvCompression;
    if (!spec) return proposed;
    const prompt = s.group.numPromptTokens;
    if (!this.streams(s, start)) {
      const rem = prompt - start;
      let c = Math.min(proposed, rem);
      const w = Math.min(observationOf(spec.policy), prompt);
      if (c < rem && rem - c < w) {
        if (rem - w > 0) c = rem - w;
        else if (rem <= maxPerStep) c = 0; // wait for a step with room for the whole window
      }
      return c;
    }
    let c = Math.min(proposed, s.group.keepBlocks * this.blockSize);
    if (spec.positions === 'cache') c = Math.min(c, this.maxModelLen - (start - s.numDropped));
    return Math.max(0, c);
  }

  /** Blocks the sequence's pending key shifts must copy first (shared blocks). */
  pendingCopies(s: Sequence): number {
    const kv = s.kv;
    if (!kv || kv.pendingShifts === 0 || !s.allocated) return 0;
    const table = this.kvCache.blockTable(s.id);
    let n = 0;
    for (let i = 0; i < kv.numBlocks; i++) {
      if (kv.shifts[i] !== 0 && this.kvCache.blocks.refCount(table[i]!) > 1) n++;
    }
    return n;
  }

  /**
   * After the planner allocated `row`'s slots: tracks the blocks the table grew by, schedules
   * the pending key shifts (their copy-on-write copies first, into `copies`) and gives the row
   * its attention-mass buffer when the policy needs one this step.
   * @throws {KvAllocatorError} OUT_OF_BLOCKS when the copies do not fit (the planner counted
   *   them in `pendingCopies`, so only a misuse gets here).
   */
  onAllocated(row: CompressedRow, start: number, copies: BlockCopy[], keyShifts: KeyShift[]): void {
    const s = row.seq;
    const kv = s.kv;
    const spec = s.group.req.kvCompression;
    if (!kv || !spec) return;
    const table = this.kvCache.blockTable(s.id);
    kv.sync(table.length, start, row.cacheStart, this.blockSize);
    if (kv.pendingShifts > 0) {
      const blocks = kv.shiftedBlocks();
      for (const c of this.kvCache.prepareRewrite(s.id, blocks)) copies.push(c);
      const after = this.kvCache.blockTable(s.id);
      for (const i of blocks) keyShifts.push({ block: after[i]!, delta: kv.shifts[i]! });
      kv.clearShifts();
    }
    const attention = spec.policy.attention;
    const prompt = s.group.numPromptTokens;
    let q = 0;
    if (attention === 'decode') q = row.len;
    else if (attention === 'prefill-end' && start < prompt && start + row.len === prompt) {
      q = Math.min(observationOf(spec.policy), row.len);
    }
    if (q > 0) {
      row.mass = kv.massBuffer(Math.ceil((row.cacheStart + row.len) / this.blockSize));
      row.massQueries = q;
    }
  }

  /**
   * After `update()` appended a step's samples: adds each row's attention mass into its
   * sequences' block scores, asks their policies what to drop, and drops it.
   * @throws {SchedulerError} INVALID_POLICY when a policy threw from `select` or selected an
   *   index that is not a droppable block (after every other sequence was handled; those only
   *   lost the oldest blocks beyond their `maxBlocks`); `details.requestIds` lists their
   *   requests, so a caller can end just them.
   */
  afterStep(rows: readonly CompressedRow[]): void {
    let error: SchedulerError | undefined;
    const failed = new Set<string>();
    for (const row of rows) {
      if (!row.seq.kv) continue; // a request without compression (its children neither)
      const seqs = row.samples && row.samples.length > 1 ? row.samples : [row.seq];
      for (const s of seqs) {
        if (!s.kv || !s.live || !s.allocated) continue;
        if (row.mass)
          s.kv.addMass(row.mass, Math.ceil((row.cacheStart + row.len) / this.blockSize));
        const e = this.compress(s);
        if (e) {
          error ??= e;
          failed.add(s.group.req.id);
        }
      }
    }
    if (error) {
      throw new SchedulerError('INVALID_POLICY', error.message, {
        cause: error.cause,
        details: { ...error.details, requestIds: [...failed] },
      });
    }
  }

  private compress(s: Sequence): SchedulerError | undefined {
    const kv = s.kv!;
    const { policy, positions } = s.group.req.kvCompression!;
    const bs = this.blockSize;
    const n = kv.numBlocks;
    const prefillDone = s.numComputed >= s.group.numPromptTokens;
    const view: KvCompressionView = {
      blockSize: bs,
      numBlocks: n,
      numTokens: s.numComputed - s.numDropped,
      totalTokens: s.numComputed,
      promptTokens: s.group.numPromptTokens,
      prefillDone,
      blockScores: kv.scores.subarray(0, n),
      blockStarts: kv.starts.subarray(0, n),
    };
    let chosen: unknown;
    let error: SchedulerError | undefined;
    try {
      chosen = policy.select(view);
    } catch (cause) {
      chosen = [];
      error = new SchedulerError(
        'INVALID_POLICY',
        `KV compression policy ${policy.name} threw from select: ${cause instanceof Error ? cause.message : String(cause)}`,
        { cause, details: { policy: policy.name } },
      );
    }
    const drop = new Uint8Array(n);
    let count = 0;
    for (const i of Array.isArray(chosen) ? (chosen as unknown[]) : []) {
      if (
        !Number.isInteger(i) ||
        (i as number) < 0 ||
        (i as number) >= n - 1 ||
        drop[i as number]
      ) {
        error ??= new SchedulerError(
          'INVALID_POLICY',
          `KV compression policy ${policy.name} selected ${String(i)}: not a droppable block of ${n} (distinct indices below the last)`,
          { details: { policy: policy.name, index: i } },
        );
        continue;
      }
      drop[i as number] = 1;
      count++;
    }
    if (!Array.isArray(chosen)) {
      error = new SchedulerError(
        'INVALID_POLICY',
        `KV compression policy ${policy.name} did not return an array`,
        { details: { policy: policy.name } },
      );
    }
    const max = s.group.keepBlocks;
    if (policy.attention !== 'prefill-end' || prefillDone) {
      for (let i = 0; i < n - 1 && n - count > max; i++) {
        if (!drop[i]) {
          drop[i] = 1;
          count++;
        }
      }
    }
    if (count === 0) return error;
    const sorted: number[] = [];
    for (let i = 0; i < n; i++) if (drop[i]) sorted.push(i);
    this.kvCache.dropBlocks(s.id, sorted);
    kv.drop(sorted, bs, positions === 'cache');
    s.numDropped += count * bs;
    this.dropped.set(policy.name, (this.dropped.get(policy.name) ?? 0) + count * bs);
    return error;
  }

  /** Per policy name: live compressed requests, blocks they hold, tokens dropped so far. */
  metrics(groups: Iterable<SequenceGroup>): Record<string, KvCompressionMetrics> {
    const out: Record<string, { requests: number; blocksHeld: number; tokensDropped: number }> = {};
    for (const [name, tokens] of this.dropped) {
      out[name] = { requests: 0, blocksHeld: 0, tokensDropped: tokens };
    }
    for (const g of groups) {
      const spec = g.req.kvCompression;
      if (!spec) continue;
      const name = spec.policy.name;
      out[name] ??= { requests: 0, blocksHeld: 0, tokensDropped: 0 };
      const m = out[name];
      m.requests++;
      const only = g.seqs.length === 1 ? g.seqs[0]! : undefined;
      if (only) m.blocksHeld += only.allocated ? this.kvCache.blockTable(only.id).length : 0;
      else m.blocksHeld += g.heldBlocks(this.kvCache);
    }
    return out;
  }
}
