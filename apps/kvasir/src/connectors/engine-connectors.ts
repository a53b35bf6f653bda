import {
  type KvBlockIo,
  type KvConnector,
  type KvConnectorContext,
  type KvConnectorFactory,
  PrefixOffloadConnector,
  SwapConnector,
  validateKvConnector,
} from '@kvasir/offload/connectors';
import type { EngineConfig } from '../config.js';
import type { ModelRunner } from '../engine/model-runner.js';
import { isHostOnly, type OffloadTiers } from './offload-tiers.js';

/** The connectors of one engine, in the order the engine calls them. */
export interface EngineConnectors {
  /** Swap preemption through the offload tiers (with `--preemption-mode swap`). */
  readonly swap: SwapConnector | undefined;
  /** Prefix blocks written to and imported from the offload tiers. */
  readonly prefixOffload: PrefixOffloadConnector | undefined;
  /** The built-ins that are on, then the user's. */
  readonly all: readonly KvConnector[];
}

/** The runner's cache as connectors move blocks through it. */
export function blockIoOf(runner: ModelRunner): KvBlockIo {
  return {
    blockBytes: runner.facts.blockBytes,
    readBlocks: (blocks) => runner.readBlocks(blocks),
    writeBlocks: (blocks, data) => runner.writeBlocks(blocks, data),
  };
}

/**
 * Makes the engine's connectors: swap and prefix offload as the configuration asks, then the
 * user's, each checked now (a broken one stops start-up, not a request).
 * @throws {OffloadError} INVALID_CONNECTOR for a user factory that returns no valid connector.
 */
export function createEngineConnectors(
  config: EngineConfig,
  offload: OffloadTiers | undefined,
  context: KvConnectorContext,
  user: readonly KvConnectorFactory[] = [],
): EngineConnectors {
  const swap =
    offload && config.preemptionMode === 'swap'
      ? new SwapConnector({ device: context.device, store: offload.store })
      : undefined;
  // Off by default where prefix blocks would compete with swapped-out blocks for a single
  // budgeted tier: there, a prefix write could evict a block with no other copy.
  const prefixOffload =
    offload &&
    config.enablePrefixCaching &&
    (config.offloadPrefix ?? !(config.preemptionMode === 'swap' && isHostOnly(offload)))
      ? new PrefixOffloadConnector({ ...context, store: offload.store })
      : undefined;
  const own = user.map((create) => validateKvConnector(create(context)));
  const all = [swap, prefixOffload, ...own].filter(
    (c): c is NonNullable<typeof c> => c !== undefined,
  );
  return { swap, prefixOffload, all };
}
