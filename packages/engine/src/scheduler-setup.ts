import type { KvCacheManager } from '@kvasir/kv-allocator';
import { queuePolicies, Scheduler } from '@kvasir/scheduler';
import type { EngineStats } from '@kvasir/server/spec';
import type { EngineSettings } from './engine-settings.js';
import type { ModelFacts } from './model-runner.js';
import { type OffloadTiers, swapSpaceBlocks } from './offload-tiers.js';

/** The scheduler an engine runs, configured from the engine config and the model's facts. */
export function createScheduler(
  config: EngineSettings,
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
    blockSize: kvCache.blockSize,
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
    ...(kv.groups.length > 1
      ? { kvGroups: kv.groups.map(({ window, blocks, tokens }) => ({ window, blocks, tokens })) }
      : {}),
  };
}
