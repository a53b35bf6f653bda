import type { KvBlockStore, TieredStore } from '@kvasir/offload';
import type { EngineSettings } from './engine-settings.js';
import type { ModelFacts } from './model-runner.js';

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
  config: EngineSettings,
  facts: Pick<ModelFacts, 'blockBytes' | 'numBlocks'>,
  tiers: readonly string[],
): number {
  if (config.preemptionMode !== 'swap' || tiers.length === 0) return 0;
  if (config.offload.swapBlocks !== undefined) return config.offload.swapBlocks;
  return tiers.every((t) => t === 'host')
    ? Math.floor(config.offload.hostBytes / facts.blockBytes)
    : 4 * facts.numBlocks;
}
