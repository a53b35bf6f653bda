import { resolve } from 'node:path';
import { formatBytes, type MemoryPlan, type OffloadTiers, swapSpaceBlocks } from '@kvasir/engine';
import {
  DiskStore,
  HostMemoryStore,
  type KvBlockStore,
  kvNamespace,
  OffloadError,
  RedisStore,
  TieredStore,
} from '@kvasir/offload';
import type { EngineConfig } from '../config.js';
import type { LoadedModel } from '../engine/load-model-runner.js';
import { KvasirAppError } from '../errors.js';
import { TIER_MEDIUM } from './kv-events.js';
import { AnnouncingStore, type TierEventSink } from './tier-events.js';

/**
 * Opens every configured offload tier (host memory, disk, Redis), checking each one now so that
 * a tier that cannot work stops start-up with the flag to fix instead of failing later. With
 * `events`, each tier reports the blocks it stores and loses (KV events' offload media).
 * @throws KvasirAppError `OFFLOAD_UNAVAILABLE` for a disk directory that cannot be used;
 *   `INVALID_CONFIG` for options a tier refuses (a Redis URL that is not `redis://`).
 */
export async function openOffloadTiers(
  config: EngineConfig,
  model: LoadedModel,
  events?: TierEventSink,
): Promise<OffloadTiers | undefined> {
  const o = config.offload;
  if (o.hostBytes === 0 && !o.diskDir && !o.redisUrl) return undefined;
  const layout = model.kvLayout;
  const namespace = kvNamespace({
    modelId: model.modelId,
    weightDigest: model.weightDigest,
    kvDtype: config.kvDtype,
    blockSize: layout.blockSize,
    numLayers: layout.numLayers,
    numKvHeads: layout.numKvHeads,
    headDim: layout.headDim,
  });
  const tiers: KvBlockStore[] = [];
  const closeOpened = () => Promise.allSettled(tiers.map((t) => t.close()));
  try {
    if (o.hostBytes > 0) tiers.push(new HostMemoryStore({ namespace, maxBytes: o.hostBytes }));
    if (o.diskDir) {
      tiers.push(
        await DiskStore.open({
          namespace,
          dir: resolve(o.diskDir),
          maxBytes: o.diskBytes ?? 4 * 1024 ** 3,
        }),
      );
    }
    if (o.redisUrl) {
      const redis = new RedisStore({ namespace, url: o.redisUrl });
      tiers.push(redis);
      // Writes before the connection is up would be dropped (the store never queues offline).
      // Unreachable is not fatal: the tier answers misses until Redis is back.
      if (!(await redis.ready(5_000))) {
        process.stderr.write(
          `[kvasir] Redis at ${o.redisUrl} is not reachable yet: that tier reports misses until it is\n`,
        );
      }
    }
  } catch (error) {
    await closeOpened();
    throw tierError(error);
  }
  // With KV events, each tier announces the prefix blocks it holds under its own medium.
  const announced = events
    ? tiers.map((t) => new AnnouncingStore(t, TIER_MEDIUM[t.tier] ?? t.tier.toUpperCase(), events))
    : tiers;
  // Write-through: a swapped-out block is in every tier before the step goes on, so a block the
  // host tier evicts is still found below it.
  const store = new TieredStore({ tiers: announced, writeMode: 'write-through' });
  return { store, tiers: announced };
}

function tierError(error: unknown): unknown {
  if (!OffloadError.isInstance(error)) return error;
  if (error.code === 'UNAVAILABLE') {
    return new KvasirAppError(
      'OFFLOAD_UNAVAILABLE',
      `--offload-disk-dir: ${error.message}; choose a directory this process can create and write`,
      { cause: error },
    );
  }
  return new KvasirAppError('INVALID_CONFIG', `offload: ${error.message}`, { cause: error });
}

/** Where swap preemption puts preempted sequences' blocks, as the banner says it. */
export interface PreemptionSetup {
  /** Host slots the scheduler may fill (0 with recompute). */
  readonly blocks: number;
  /** `recompute`, or `swap to host (N blocks, X)` and the tiers below. */
  readonly description: string;
}

/**
 * Checks that swap preemption has somewhere to swap to, and says where.
 * @throws KvasirAppError `INVALID_CONFIG` when `--preemption-mode swap` would hold no block
 *   (no tier, a host budget smaller than one block, or `--swap-blocks 0`): otherwise every
 *   preemption would silently recompute.
 */
export function checkPreemptionSetup(
  config: EngineConfig,
  plan: MemoryPlan,
  tiers: readonly string[],
): PreemptionSetup {
  if (config.preemptionMode !== 'swap') return { blocks: 0, description: 'recompute' };
  const facts = { blockBytes: plan.kvBytesPerBlock, numBlocks: plan.numBlocks };
  const blocks = swapSpaceBlocks(config, facts, tiers);
  if (blocks > 0) {
    return {
      blocks,
      description: `swap (${blocks} blocks = ${formatBytes(blocks * plan.kvBytesPerBlock)} in ${tiers.join(' → ')})`,
    };
  }
  const why =
    tiers.length === 0
      ? 'there is no offload tier (--offload-host-bytes is 0 and no --offload-disk-dir or --offload-redis-url)'
      : config.offload.swapBlocks === 0
        ? '--swap-blocks is 0'
        : `the host tier's ${formatBytes(config.offload.hostBytes)} (--offload-host-bytes) holds no ${formatBytes(plan.kvBytesPerBlock)} block`;
  throw new KvasirAppError(
    'INVALID_CONFIG',
    `--preemption-mode swap has nowhere to swap to: ${why}. Give it host memory (--offload-host-bytes, default 256MiB), a disk or Redis tier, or use --preemption-mode recompute`,
    { details: { tiers, blockBytes: plan.kvBytesPerBlock } },
  );
}
