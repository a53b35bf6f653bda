import type { BlockHash } from '@kvasir/kv-allocator';
import { OffloadError } from './errors.js';
import { Counters } from './stats.js';
import { TransferQueue } from './transfer-queue.js';
import type { EvictionSource, KvBlockEntry, KvBlockStore, OffloadStats } from './types.js';
import { checkEntries, checkKeys, checkOpen } from './validate.js';

/** When lower tiers receive a block. */
export type WriteMode = 'write-through' | 'write-back';

/** Options of {@link TieredStore}. */
export interface TieredStoreOptions {
  /** Tiers, fastest first (e.g. host, disk, Redis), all in the same namespace. Closed with the tiered store. */
  readonly tiers: readonly KvBlockStore[];
  /**
   * `write-through` (default): `putMany` writes every tier before it resolves.
   * `write-back`: `putMany` writes the first tier only; a block reaches the next tier when it is
   * evicted (demotion), so the slow tiers see only what the fast ones could not keep.
   */
  readonly writeMode?: WriteMode;
  /** Deadline of `getMany`/`countPrefix`/`has` when the call gives none (default 1,000 ms). */
  readonly defaultDeadlineMs?: number;
  /** Transfers waiting at most (default 1,024); beyond it fetches miss at once and background moves are dropped. */
  readonly maxQueuedTransfers?: number;
  /** Transfers in flight at most (default 4). */
  readonly maxConcurrentTransfers?: number;
  /** Copy a block found in a lower tier into the tiers above it (default true). */
  readonly promoteOnHit?: boolean;
  /** Clock in milliseconds (default `Date.now`). */
  readonly now?: () => number;
}

/** Options of one {@link TieredStore.fetch}. */
export interface FetchOptions {
  /** Milliseconds from now after which whatever has not arrived is a miss. */
  readonly deadlineMs?: number;
}

/** Result of {@link TieredStore.fetch}. */
export interface FetchResult {
  /** Each key's block, or undefined (a miss: the engine recomputes it). */
  readonly values: (Uint8Array | undefined)[];
  /** Index of the tier that served each key, -1 for a miss. */
  readonly servedBy: Int8Array;
  /** Keys still being looked up when the deadline passed (included in the misses). */
  readonly expired: number;
}

/** `stats()` of a {@link TieredStore}. */
export interface TieredStoreStats extends OffloadStats {
  /** Hits per tier, in tier order. */
  readonly hitsByTier: readonly number[];
  /** Keys whose lookup missed its deadline (answered as misses). */
  readonly expired: number;
  /** Blocks that arrived after their fetch's deadline and were dropped. */
  readonly lateDropped: number;
  /** Transfers refused because the queue was full. */
  readonly rejected: number;
  /** Transfers whose tier call threw. */
  readonly failedTransfers: number;
  readonly promotions: number;
  readonly demotions: number;
  /** Demotions or promotions dropped (queue full or expired). */
  readonly movesDropped: number;
  /** Transfers waiting and running now. */
  readonly queued: number;
  readonly active: number;
  /** Each tier's own stats, in tier order. */
  readonly tiers: readonly OffloadStats[];
}

function isEvictionSource(s: unknown): s is EvictionSource {
  return typeof (s as Partial<EvictionSource>).onEvict === 'function';
}

/**
 * Host → disk → Redis (any tiers, fastest first) behind one `KvBlockStore`. A lookup walks
 * the tiers in order and promotes what it finds in a lower tier to the tiers above; blocks
 * evicted from a tier are demoted to the next (write-back). Everything below the first tier
 * goes through one bounded transfer queue, and every lookup has a deadline: what has not
 * arrived by then is a miss (the engine recomputes) and a block that arrives later is
 * dropped, never handed out. A tier that throws or hangs costs misses, never a hang.
 */
export class TieredStore implements KvBlockStore {
  readonly tier = 'tiered';
  readonly namespace: string;
  readonly writeMode: WriteMode;
  /** The smallest of the tiers' limits, so a block accepted can live in every tier. */
  readonly maxValueBytes: number;
  private readonly tiers: readonly KvBlockStore[];
  private readonly queue: TransferQueue;
  private readonly now: () => number;
  private readonly defaultDeadlineMs: number;
  private readonly promoteOnHit: boolean;
  private readonly counters = new Counters();
  private readonly hitsByTier: number[];
  private readonly unsubscribe: (() => void)[] = [];
  private expired = 0;
  private lateDropped = 0;
  private rejected = 0;
  private failedTransfers = 0;
  private promotions = 0;
  private demotions = 0;
  private movesDropped = 0;
  private closed = false;

  /** @throws {OffloadError} INVALID_OPTIONS for no tiers, tiers of different namespaces, or bad limits. */
  constructor(options: TieredStoreOptions) {
    const tiers = options.tiers;
    if (!Array.isArray(tiers) || tiers.length === 0) {
      throw new OffloadError('INVALID_OPTIONS', 'TieredStore needs at least one tier');
    }
    const ns = (tiers[0] as KvBlockStore).namespace;
    for (const t of tiers) {
      if (t.namespace !== ns) {
        throw new OffloadError(
          'INVALID_OPTIONS',
          'all tiers of a TieredStore must share one namespace',
          {
            details: { expected: ns, got: t.namespace, tier: t.tier },
          },
        );
      }
    }
    const intOpt = (name: string, v: number | undefined, dflt: number): number => {
      const x = v ?? dflt;
      if (!Number.isInteger(x) || x < 1) {
        throw new OffloadError('INVALID_OPTIONS', `${name} must be a positive integer`, {
          details: { [name]: v },
        });
      }
      return x;
    };
    this.namespace = ns;
    this.tiers = tiers;
    this.maxValueBytes = Math.min(...tiers.map((t) => t.maxValueBytes));
    this.writeMode = options.writeMode ?? 'write-through';
    if (this.writeMode !== 'write-through' && this.writeMode !== 'write-back') {
      throw new OffloadError('INVALID_OPTIONS', 'writeMode must be write-through or write-back', {
        details: { writeMode: this.writeMode },
      });
    }
    this.defaultDeadlineMs = intOpt('defaultDeadlineMs', options.defaultDeadlineMs, 1000);
    this.now = options.now ?? Date.now;
    this.queue = new TransferQueue(
      intOpt('maxQueuedTransfers', options.maxQueuedTransfers, 1024),
      intOpt('maxConcurrentTransfers', options.maxConcurrentTransfers, 4),
      this.now,
    );
    this.promoteOnHit = options.promoteOnHit ?? true;
    this.hitsByTier = tiers.map(() => 0);
    if (this.writeMode === 'write-back') {
      tiers.forEach((t, i) => {
        const below = tiers[i + 1];
        if (below === undefined || !isEvictionSource(t)) return;
        this.unsubscribe.push(t.onEvict((key, value) => this.demote(below, key, value)));
      });
    }
  }

  // The evicted value is handed over by the tier, so it can be written later without a copy.
  private demote(below: KvBlockStore, key: BlockHash, value: Uint8Array): void {
    if (this.closed) return;
    void this.queue
      .submit(() => below.putMany([{ key, value }]), Number.POSITIVE_INFINITY, false)
      .then((o) => {
        if (o.status === 'done') this.demotions++;
        else {
          this.movesDropped++;
          if (o.status === 'failed') this.failedTransfers++;
        }
      });
  }

  private background(tier: KvBlockStore, entries: KvBlockEntry[]): void {
    void this.queue
      .submit(() => tier.putMany(entries), Number.POSITIVE_INFINITY, false)
      .then((o) => {
        if (o.status === 'done') this.promotions += entries.length;
        else {
          this.movesDropped += entries.length;
          if (o.status === 'failed') this.failedTransfers++;
        }
      });
  }

  /**
   * Write-through: every tier, concurrently, before resolving. Write-back: the first tier only.
   * The values must not be modified until the returned promise resolves.
   * @returns the most entries any tier stored.
   * @throws {OffloadError} INVALID_KEY, INVALID_VALUE, VALUE_TOO_LARGE (from any tier), CLOSED.
   */
  async putMany(entries: readonly KvBlockEntry[]): Promise<number> {
    checkOpen(this.closed, this.tier);
    // Checked against every tier's limit up front, so no tier stores what another refuses.
    checkEntries(entries, this.maxValueBytes);
    const targets = this.writeMode === 'write-through' ? this.tiers : this.tiers.slice(0, 1);
    const settled = await Promise.allSettled(targets.map((t) => t.putMany(entries)));
    let best = 0;
    for (const s of settled) {
      if (s.status === 'fulfilled') best = Math.max(best, s.value);
      else if (OffloadError.isInstance(s.reason)) throw s.reason;
      else this.counters.errors++;
    }
    this.counters.puts += best;
    return best;
  }

  /**
   * Looks `keys` up tier by tier within a deadline. Found blocks are promoted to the tiers above
   * the one that had them. Never waits past the deadline; what arrives later is dropped.
   * @throws {OffloadError} INVALID_KEY, CLOSED.
   */
  async fetch(keys: readonly BlockHash[], options: FetchOptions = {}): Promise<FetchResult> {
    checkOpen(this.closed, this.tier);
    checkKeys(keys);
    const deadlineMs = options.deadlineMs ?? this.defaultDeadlineMs;
    const deadlineAt = this.now() + deadlineMs;
    const values: (Uint8Array | undefined)[] = new Array(keys.length).fill(undefined);
    const servedBy = new Int8Array(keys.length).fill(-1);
    let settled = false;
    let timedOut = false;

    const work = async (): Promise<void> => {
      let pending = keys.map((_, i) => i);
      for (let t = 0; t < this.tiers.length && pending.length > 0; t++) {
        const tier = this.tiers[t] as KvBlockStore;
        const ks = pending.map((i) => keys[i] as BlockHash);
        let got: (Uint8Array | undefined)[] | undefined;
        if (t === 0) {
          try {
            got = await tier.getMany(ks);
          } catch {
            this.failedTransfers++;
          }
        } else {
          const o = await this.queue.submit(() => tier.getMany(ks), deadlineAt, true);
          if (o.status === 'done') got = o.value;
          else if (o.status === 'rejected') this.rejected++;
          else if (o.status === 'failed') this.failedTransfers++;
          else {
            // Expired while queued: the deadline has passed for every pending key.
            timedOut = true;
            break;
          }
        }
        if (settled) {
          // The caller was answered at the deadline; these blocks are too late to use.
          for (const v of got ?? []) if (v !== undefined) this.lateDropped++;
          return;
        }
        if (got === undefined) continue;
        const next: number[] = [];
        const found: KvBlockEntry[] = [];
        for (let j = 0; j < pending.length; j++) {
          const i = pending[j] as number;
          const v = got[j];
          if (v === undefined) {
            next.push(i);
            continue;
          }
          values[i] = v;
          servedBy[i] = t;
          this.hitsByTier[t] = (this.hitsByTier[t] ?? 0) + 1;
          found.push({ key: keys[i] as BlockHash, value: v });
        }
        if (t > 0 && found.length > 0 && this.promoteOnHit) await this.promote(found, t);
        pending = next;
      }
    };

    let timer: ReturnType<typeof setTimeout> | undefined;
    const deadline = new Promise<'deadline'>((resolve) => {
      timer = setTimeout(() => resolve('deadline'), Math.max(0, deadlineAt - this.now()));
      timer.unref?.();
    });
    const outcome = await Promise.race([work().then(() => 'done' as const), deadline]);
    settled = true;
    clearTimeout(timer);
    // Snapshot: the lookup may still be running and must not write into what the caller holds.
    const outValues = values.slice();
    const outServed = servedBy.slice();
    let expired = 0;
    let hits = 0;
    for (const s of outServed) if (s >= 0) hits++;
    if (outcome === 'deadline' || timedOut) expired = keys.length - hits;
    this.expired += expired;
    this.counters.hits += hits;
    this.counters.misses += keys.length - hits;
    return { values: outValues, servedBy: outServed, expired };
  }

  private async promote(found: KvBlockEntry[], hitTier: number): Promise<void> {
    // The first tier is the host in practice: copy in now, while the values are still ours.
    try {
      await (this.tiers[0] as KvBlockStore).putMany(found);
      this.promotions += found.length;
    } catch {
      this.failedTransfers++;
    }
    if (hitTier <= 1) return;
    // Middle tiers are written in the background, from copies, since the caller owns `found`.
    const copies = found.map((e) => ({ key: e.key, value: e.value.slice() }));
    for (let t = 1; t < hitTier; t++) this.background(this.tiers[t] as KvBlockStore, copies);
  }

  /** {@link fetch} with the default deadline, values only. @throws {OffloadError} INVALID_KEY, CLOSED. */
  async getMany(keys: readonly BlockHash[]): Promise<(Uint8Array | undefined)[]> {
    return (await this.fetch(keys)).values;
  }

  /** Present in any tier. @throws {OffloadError} INVALID_KEY, CLOSED. */
  async has(key: BlockHash): Promise<boolean> {
    return (await this.countPrefix([key])) === 1;
  }

  /**
   * How many of `keys`, from the first, are present in some tier, within the default deadline
   * (a tier that does not answer in time counts as not having them). Each tier is asked for the
   * rest of the prefix in one call; it takes more calls only when a prefix is spread over tiers.
   * @throws {OffloadError} INVALID_KEY, CLOSED.
   */
  async countPrefix(keys: readonly BlockHash[], options: FetchOptions = {}): Promise<number> {
    checkOpen(this.closed, this.tier);
    checkKeys(keys);
    const deadlineAt = this.now() + (options.deadlineMs ?? this.defaultDeadlineMs);
    let n = 0;
    let settled = false;
    const work = async (): Promise<void> => {
      let progressed = true;
      while (progressed && n < keys.length) {
        progressed = false;
        for (let t = 0; t < this.tiers.length; t++) {
          const tier = this.tiers[t] as KvBlockStore;
          const rest = keys.slice(n);
          let m = 0;
          if (t === 0) m = await tier.countPrefix(rest).catch(() => 0);
          else {
            const o = await this.queue.submit(() => tier.countPrefix(rest), deadlineAt, true);
            if (o.status !== 'done') continue;
            m = o.value;
          }
          if (settled) return;
          if (m > 0) {
            n += m;
            progressed = true;
            break;
          }
        }
      }
    };
    let timer: ReturnType<typeof setTimeout> | undefined;
    const deadline = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, Math.max(0, deadlineAt - this.now()));
      timer.unref?.();
    });
    await Promise.race([work(), deadline]);
    settled = true;
    clearTimeout(timer);
    return n;
  }

  /** Deletes from every tier. @returns how many keys some tier held. @throws {OffloadError} INVALID_KEY, CLOSED. */
  async delete(keys: readonly BlockHash[]): Promise<number> {
    checkOpen(this.closed, this.tier);
    checkKeys(keys);
    const counts = await Promise.allSettled(this.tiers.map((t) => t.delete(keys)));
    let best = 0;
    for (const c of counts) if (c.status === 'fulfilled') best = Math.max(best, c.value);
    this.counters.deletes += best;
    return best;
  }

  /**
   * Copies every block the first tier holds into the second (in batches of `batch` blocks),
   * e.g. before a write-back engine shuts down so that a restart finds its host blocks on
   * disk. Needs a first tier that can list its keys (`HostMemoryStore`, `DiskStore`).
   * @returns how many blocks the second tier stored.
   * @throws {OffloadError} CLOSED.
   */
  async flush(batch = 16): Promise<number> {
    checkOpen(this.closed, this.tier);
    const top = this.tiers[0] as KvBlockStore & { keys?: () => BlockHash[] };
    const below = this.tiers[1];
    if (below === undefined || typeof top.keys !== 'function') return 0;
    const keys = top.keys();
    let stored = 0;
    for (let i = 0; i < keys.length; i += batch) {
      const part = keys.slice(i, i + batch);
      const values = await top.getMany(part);
      const entries: KvBlockEntry[] = [];
      values.forEach((value, j) => {
        if (value !== undefined) entries.push({ key: part[j] as BlockHash, value });
      });
      try {
        stored += await below.putMany(entries);
      } catch {
        this.failedTransfers++;
      }
    }
    return stored;
  }

  /** Resolves once no transfer is queued or running (background promotions and demotions done). */
  drain(): Promise<void> {
    return this.queue.drain();
  }

  /** This store's counters, queue state and every tier's own stats. */
  stats(): TieredStoreStats {
    const tiers = this.tiers.map((t) => t.stats());
    let corrupt = 0;
    let foreign = 0;
    let errors = this.counters.errors + this.failedTransfers;
    let evictions = 0;
    for (const s of tiers) {
      corrupt += s.corrupt;
      foreign += s.foreign;
      errors += s.errors;
      evictions += s.evictions;
    }
    const base = this.counters.snapshot(this.tier, undefined, undefined, Number.POSITIVE_INFINITY);
    return {
      ...base,
      corrupt,
      foreign,
      errors,
      evictions,
      hitsByTier: [...this.hitsByTier],
      expired: this.expired,
      lateDropped: this.lateDropped,
      rejected: this.rejected,
      failedTransfers: this.failedTransfers,
      promotions: this.promotions,
      demotions: this.demotions,
      movesDropped: this.movesDropped,
      queued: this.queue.queued,
      active: this.queue.active,
      tiers,
    };
  }

  /** Waits up to `drainTimeoutMs` (default 5,000) for background moves, then closes every tier. Idempotent. */
  async close(drainTimeoutMs = 5000): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const u of this.unsubscribe) u();
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([
      this.queue.drain(),
      new Promise<void>((r) => {
        timer = setTimeout(r, drainTimeoutMs);
        timer.unref?.();
      }),
    ]);
    clearTimeout(timer);
    await Promise.allSettled(this.tiers.map((t) => t.close()));
  }
}
