import type { HashKey, KvEvent, Medium } from './kv-event-decoder.js';

/** How much a cached block saves, by tier: 1 is a block on the engine's device (no prefill). */
export type TierWeights = Readonly<Record<Medium, number>>;

/**
 * llm-d's weights for its precise prefix scorer (GPU 1.0, CPU 0.8), extended to Kvasir's lower
 * tiers: a block read back from local disk or Redis still saves its prefill, at a cost.
 */
export const DEFAULT_TIER_WEIGHTS: TierWeights = { GPU: 1, CPU: 0.8, DISK: 0.6, REDIS: 0.5 };

/** Weight of a medium missing from the table. */
const UNKNOWN_MEDIUM_WEIGHT = 0.5;

/** How far a prompt's blocks are cached on one replica. */
export interface PrefixMatch {
  /** Leading blocks the replica holds in some tier (or is predicted to hold). */
  readonly blocks: number;
  /** The same blocks, each counted by its best tier's weight (≤ `blocks`). */
  readonly weighted: number;
  /** Of `blocks`, those only predicted (a request sent there, its events not in yet). */
  readonly predicted: number;
}

/** Options of {@link PrefixIndex}. */
export interface PrefixIndexOptions {
  readonly tierWeights?: TierWeights;
  /**
   * Media every replica reads (a Redis shared by all of them): a block one replica stored there
   * counts for all. None by default.
   */
  readonly sharedMedia?: readonly Medium[];
}

/**
 * Which replica holds which prefix blocks in which tier, as their KV events say: per replica,
 * a map from block hash to a bit set of media. O(1) per event block; a prompt is matched in
 * O(prompt blocks) per replica. Router-side predictions (blocks a replica will hold once the
 * request just sent to it is prefilled) are kept apart, so {@link blocks} is only what events
 * said.
 */
export class PrefixIndex {
  readonly #replicas = new Map<string, Map<HashKey, number>>();
  readonly #predicted = new Map<string, Map<HashKey, number>>();
  /** Block → how many replicas report it in a shared medium. */
  readonly #shared = new Map<HashKey, number>();
  readonly #mediumBits = new Map<Medium, number>();
  readonly #bitWeights: number[] = [];
  readonly #weights: TierWeights;
  readonly #sharedMask: number;

  constructor(options: PrefixIndexOptions = {}) {
    this.#weights = options.tierWeights ?? DEFAULT_TIER_WEIGHTS;
    let mask = 0;
    for (const m of options.sharedMedia ?? []) mask |= this.#bit(m);
    this.#sharedMask = mask;
  }

  #bit(medium: Medium): number {
    let bit = this.#mediumBits.get(medium);
    if (bit === undefined) {
      const index = this.#mediumBits.size;
      // 31 distinct media is far beyond any engine's tiers; more fold into the last bit.
      bit = 1 << Math.min(index, 30);
      this.#mediumBits.set(medium, bit);
      this.#bitWeights[Math.min(index, 30)] = this.#weights[medium] ?? UNKNOWN_MEDIUM_WEIGHT;
    }
    return bit;
  }

  #weightOf(mask: number): number {
    let best = 0;
    for (let i = 0; mask !== 0; i++, mask >>>= 1) {
      if ((mask & 1) !== 0) best = Math.max(best, this.#bitWeights[i] ?? UNKNOWN_MEDIUM_WEIGHT);
    }
    return best;
  }

  #blocksOf(replica: string): Map<HashKey, number> {
    let m = this.#replicas.get(replica);
    if (m === undefined) {
      m = new Map();
      this.#replicas.set(replica, m);
    }
    return m;
  }

  #setMask(replica: string, blocks: Map<HashKey, number>, hash: HashKey, mask: number): void {
    const before = blocks.get(hash) ?? 0;
    if (mask === 0) blocks.delete(hash);
    else blocks.set(hash, mask);
    const wasShared = (before & this.#sharedMask) !== 0;
    const isShared = (mask & this.#sharedMask) !== 0;
    if (wasShared !== isShared) {
      const n = (this.#shared.get(hash) ?? 0) + (isShared ? 1 : -1);
      if (n <= 0) this.#shared.delete(hash);
      else this.#shared.set(hash, n);
    }
    if (mask !== 0) this.#predicted.get(replica)?.delete(hash);
  }

  /** Applies one event from `replica`'s stream. */
  apply(replica: string, event: KvEvent): void {
    const blocks = this.#blocksOf(replica);
    if (event.type === 'AllBlocksCleared') {
      this.clear(replica);
      return;
    }
    const bit = this.#bit(event.medium);
    for (const hash of event.blockHashes) {
      const mask = blocks.get(hash) ?? 0;
      this.#setMask(replica, blocks, hash, event.type === 'BlockStored' ? mask | bit : mask & ~bit);
      if (event.type === 'BlockRemoved') this.#predicted.get(replica)?.delete(hash);
    }
  }

  /** Forgets everything `replica` holds (its cache was cleared, or it restarted). */
  clear(replica: string): void {
    const blocks = this.#replicas.get(replica);
    if (blocks !== undefined) {
      for (const hash of [...blocks.keys()]) this.#setMask(replica, blocks, hash, 0);
    }
    this.#predicted.delete(replica);
  }

  /** Forgets a replica altogether. */
  delete(replica: string): void {
    this.clear(replica);
    this.#replicas.delete(replica);
  }

  /**
   * Records that `replica` will hold `hashes` shortly (a request was just sent to it), so a
   * burst of requests sharing a prompt follows the first before its events arrive. A prediction
   * ends when an event names the block, or after `ttlMs`.
   */
  predict(replica: string, hashes: readonly HashKey[], ttlMs: number, now = Date.now()): void {
    let p = this.#predicted.get(replica);
    if (p === undefined) {
      p = new Map();
      this.#predicted.set(replica, p);
    }
    const blocks = this.#replicas.get(replica);
    for (const hash of hashes) if (!blocks?.has(hash)) p.set(hash, now + ttlMs);
    if (p.size > 4 * hashes.length + 4096) {
      for (const [hash, until] of p) if (until <= now) p.delete(hash);
    }
  }

  /** The blocks `replica`'s events say it holds, in any tier or in `medium` only. */
  blocks(replica: string, medium?: Medium): Set<HashKey> {
    const out = new Set<HashKey>();
    const blocks = this.#replicas.get(replica);
    if (blocks === undefined) return out;
    const bit = medium === undefined ? -1 : this.#mediumBits.get(medium);
    if (bit === undefined) return out;
    for (const [hash, mask] of blocks) if ((mask & bit) !== 0) out.add(hash);
    return out;
  }

  /** Number of blocks `replica` holds by its events (all tiers). */
  size(replica: string): number {
    return this.#replicas.get(replica)?.size ?? 0;
  }

  /** The replicas with an entry (events or predictions). */
  replicas(): string[] {
    return [...new Set([...this.#replicas.keys(), ...this.#predicted.keys()])];
  }

  /**
   * How many of `hashes` (a prompt's block chain, in order) `replica` holds from the first on:
   * a hole ends the prefix, as it ends the engine's prefix-cache lookup.
   */
  match(replica: string, hashes: readonly HashKey[], now = Date.now()): PrefixMatch {
    const blocks = this.#replicas.get(replica);
    const predicted = this.#predicted.get(replica);
    let n = 0;
    let weighted = 0;
    let fromPredictions = 0;
    for (const hash of hashes) {
      let w = 0;
      const mask = blocks?.get(hash);
      if (mask !== undefined) w = this.#weightOf(mask);
      if (this.#shared.has(hash)) w = Math.max(w, this.#weightOf(this.#sharedMask));
      if (w === 0) {
        const until = predicted?.get(hash);
        if (until !== undefined && until > now) {
          w = 1;
          fromPredictions++;
        }
      }
      if (w === 0) break;
      n++;
      weighted += w;
    }
    return { blocks: n, weighted, predicted: fromPredictions };
  }
}
