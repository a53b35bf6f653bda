// The requests waiting for admission (new, or preempted by recompute), in queue-policy order.
import type { KvCacheManager } from '@kvasir/kv-allocator';
import type { QueueContext, QueuePolicy } from './policies.js';
import { type SequenceGroup, WAITING } from './request-state.js';

/**
 * Waiting requests. Entries that left the waiting state (admitted, aborted) stay until the
 * next `prune()`, so a step can walk the queue while it admits from it.
 */
export class WaitingQueue {
  private list: SequenceGroup[] = [];

  constructor(
    private readonly policy: QueuePolicy,
    private readonly kvCache: KvCacheManager,
    private readonly enablePrefixCaching: boolean,
    private readonly now: () => number,
  ) {}

  get length(): number {
    return this.list.length;
  }

  push(g: SequenceGroup): void {
    this.list.push(g);
  }

  /** Drops entries no longer waiting. */
  prune(): void {
    this.list = this.list.filter((g) => g.state === WAITING);
  }

  /**
   * The queue sorted in place by policy rank, ties by arrival (nearly sorted between steps:
   * cheap). Prefix lookups for the policy are made at most once per request and call.
   */
  ordered(): readonly SequenceGroup[] {
    const list = this.list;
    if (list.length <= 1) return list;
    let cache: Map<SequenceGroup, number> | undefined;
    const ctx: QueueContext = {
      now: this.now(),
      queueLength: list.length,
      cachedPrefixTokens: (req) => {
        const g = req as SequenceGroup;
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
    for (const g of list) g.rank = g.state === WAITING ? this.policy.rank(g, ctx) : 0;
    list.sort((a, b) => a.rank - b.rank || a.arrivalIndex - b.arrivalIndex);
    return list;
  }
}
