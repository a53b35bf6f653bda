import type { KvCacheManager } from '@kvasir/kv-allocator';
import type { KvBlockStore, TieredStore } from '@kvasir/offload';
import { queuePolicies, Scheduler } from '@kvasir/scheduler';
import type { EngineStats } from '@kvasir/server/spec';
import type { EngineConfig } from './config.js';
import type { ModelFacts } from './runner.js';

/** The offload store and its tiers (host, disk, Redis), top first. */
export interface OffloadTiers {
  readonly store: TieredStore;
  readonly tiers: readonly KvBlockStore[];
}

/** With only a host tier, swap slots and prefix blocks would compete for one budget. */
export const isHostOnly = (offload: OffloadTiers | undefined): boolean =>
  (offload?.tiers.length ?? 0) === 1;

/**
 * Blocks swap preemption may move out of the device (0: every preemption recomputes). With the
 * host tier alone, what its budget holds; with a disk or Redis tier below (write-through keeps
 * there the blocks the host tier evicts), four times the device's blocks.
 */
export function swapSpaceBlocks(
  config: EngineConfig,
  facts: Pick<ModelFacts, 'blockBytes' | 'numBlocks'>,
  tiers: readonly string[],
): number {
  if (config.preemptionMode !== 'swap' || tiers.length === 0) return 0;
  if (config.offload.swapBlocks !== undefined) return config.offload.swapBlocks;
  return tiers.every((t) => t === 'host')
    ? Math.floor(config.offload.hostBytes / facts.blockBytes)
    : 4 * facts.numBlocks;
}

/** The scheduler an engine runs, configured from the engine config and the model's facts. */
export function createScheduler(
  config: EngineConfig,
  kvCache: KvCacheManager,
  facts: ModelFacts,
  offload: OffloadTiers | undefined,
): Scheduler {
  const maxModelLen = Math.min(config.maxModelLen ?? facts.maxModelLen, facts.maxModelLen);
  const hostSwapBlocks = swapSpaceBlocks(config, facts, offload?.tiers.map((t) => t.tier) ?? []);
  return new Scheduler({
    kvCache,
    maxModelLen,
    maxNumSeqs: config.maxNumSeqs,
    maxNumBatchedTokens: config.enableChunkedPrefill
      ? config.maxNumBatchedTokens
      : Math.max(config.maxNumBatchedTokens, maxModelLen),
    enableChunkedPrefill: config.enableChunkedPrefill,
    enablePrefixCaching: config.enablePrefixCaching,
    preemptionMode: config.preemptionMode,
    hostSwapBlocks,
    queuePolicy: queuePolicies[config.queuePolicy](),
    clock: () => performance.now() / 1000,
  });
}

/** What `/metrics` reads of an engine: cache, scheduler, offload tiers, survived failures. */
export function engineStats(
  kvCache: KvCacheManager,
  scheduler: Scheduler,
  offload: OffloadTiers | undefined,
  failures: { readonly steps: number; readonly requests: number },
): EngineStats {
  const kv = kvCache.stats();
  const m = scheduler.metrics();
  const offloadHits: Record<string, number> = {};
  if (offload) {
    const byTier = offload.store.stats().hitsByTier;
    offload.tiers.forEach((tier, i) => {
      offloadHits[tier.tier] = byTier[i] ?? 0;
    });
  }
  return {
    kvCacheUsage: kv.usage,
    blocks: {
      total: kv.numBlocks,
      used: kv.usedBlocks,
      cached: kv.cachedBlocks,
      free: kv.freeBlocks,
    },
    prefixCache: { queries: m.prefixQueryTokens, hits: m.prefixHitTokens },
    requests: {
      running: m.numRunning,
      waiting: m.numWaiting,
      preempted: m.numSwapped + m.numPreemptedWaiting,
    },
    preemptions: { recompute: m.preemptionsRecompute, swap: m.preemptionsSwap },
    offloadHits,
    evictions: kv.evictions,
    failures,
    offloadTiers: (offload?.tiers ?? []).map((tier) => {
      const t = tier.stats();
      // Tiers that can be disconnected (Redis) report their connection state.
      const status = (t as { status?: unknown }).status;
      return {
        tier: t.tier,
        ...(typeof status === 'string' ? { connected: status === 'ready' } : {}),
        misses: t.misses,
        corrupt: t.corrupt,
        foreign: t.foreign,
        errors: t.errors,
        evictions: t.evictions,
      };
    }),
    kvCompression: m.kvCompression,
  };
}
