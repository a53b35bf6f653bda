import {
  type KvBlockIo,
  type KvConnector,
  type KvConnectorContext,
  type KvConnectorFactory,
  type KvConnectorRequest,
  type KvConnectorStep,
  PrefixOffloadConnector,
  SwapConnector,
  validateKvConnector,
} from '@kvasir/offload/connectors';
import type { EngineSettings } from './engine-settings.js';
import type { ModelRunner } from './model-runner.js';
import { isHostOnly, type OffloadTiers } from './offload-tiers.js';

/** Reports a connector's failure: its name and what went wrong. */
export type ConnectorFailure = (connector: string, message: string) => void;

/**
 * The connectors of one engine, called in order at the contract's call points: the built-ins
 * that are on (swap, then prefix offload), then the user's.
 *
 * A connector is storage outside the cache, so its failure is a miss, never a failed request:
 * an `onAdmit` that throws or resolves to something other than a count of prompt tokens brings
 * nothing for that request; a `betweenSteps`, `afterForward` or `hasPendingWork` that throws is
 * skipped. Each failure is reported to `onFailure`. Only `beforeForward` may fail a step (a
 * block that cannot be moved), as the contract says.
 */
export class EngineConnectors {
  /** Swap preemption through the offload tiers (with `--preemption-mode swap`). */
  readonly swap: SwapConnector | undefined;
  /** Prefix blocks written to and imported from the offload tiers. */
  readonly prefixOffload: PrefixOffloadConnector | undefined;
  /** The built-ins that are on, then the user's. */
  readonly all: readonly KvConnector[];
  /** True when a connector looks requests up at admission (`onAdmit`). */
  readonly admits: boolean;

  readonly #onFailure: ConnectorFailure;

  constructor(
    swap: SwapConnector | undefined,
    prefixOffload: PrefixOffloadConnector | undefined,
    user: readonly KvConnector[],
    onFailure: ConnectorFailure,
  ) {
    this.#onFailure = onFailure;
    this.swap = swap;
    this.prefixOffload = prefixOffload;
    this.all = [swap, prefixOffload, ...user].filter(
      (c): c is NonNullable<typeof c> => c !== undefined,
    );
    this.admits = this.all.some((c) => c.onAdmit);
  }

  /** True while a connector has work for {@link betweenSteps}: the engine loop stays awake. */
  get hasPendingWork(): boolean {
    return this.all.some((c) => this.#hasPendingWork(c));
  }

  /** Scheduler side: each connector looks the prompt up and brings in what it finds. */
  async onAdmit(request: KvConnectorRequest): Promise<void> {
    for (const c of this.all) {
      if (!c.onAdmit) continue;
      let tokens: unknown;
      try {
        tokens = await c.onAdmit(request);
      } catch (error) {
        this.#failed(c, 'onAdmit', error);
        continue;
      }
      const most = request.promptTokens.length;
      if (typeof tokens !== 'number' || !Number.isInteger(tokens) || tokens < 0 || tokens > most) {
        this.#onFailure(
          c.name,
          `onAdmit resolved to ${typeof tokens === 'number' ? tokens : typeof tokens}, not a count of prompt tokens from 0 to ${most}`,
        );
      }
    }
  }

  /** Scheduler side, with no plan in flight: the pending work that changes the allocator. */
  async betweenSteps(): Promise<void> {
    for (const c of this.all) {
      if (!this.#hasPendingWork(c)) continue;
      try {
        await c.betweenSteps?.();
      } catch (error) {
        this.#failed(c, 'betweenSteps', error);
      }
    }
  }

  /** Worker side: the step's block moves; resolves to the requests whose KV was lost. */
  async beforeForward(step: KvConnectorStep): Promise<Set<string>> {
    const lost = new Set<string>();
    for (const c of this.all) {
      for (const id of (await c.beforeForward?.(step)) ?? []) lost.add(id);
    }
    return lost;
  }

  /** Worker side: the step's forward pass is queued. */
  afterForward(step: KvConnectorStep): void {
    for (const c of this.all) {
      try {
        c.afterForward?.(step);
      } catch (error) {
        this.#failed(c, 'afterForward', error);
      }
    }
  }

  /** Closes every connector (each drops pending work and waits for its writes). */
  async close(): Promise<void> {
    await Promise.all(this.all.map((c) => c.close()));
  }

  #hasPendingWork(c: KvConnector): boolean {
    try {
      return c.hasPendingWork === true;
    } catch (error) {
      this.#failed(c, 'hasPendingWork', error);
      return false;
    }
  }

  #failed(c: KvConnector, hook: string, error: unknown): void {
    this.#onFailure(
      c.name,
      `${hook} threw: ${error instanceof Error ? error.message : String(error)}`,
    );
  }
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
 * user's, each checked now (a broken one stops start-up, not a request); `onFailure` hears of
 * each failure a connector has once running.
 * @throws {OffloadError} INVALID_CONNECTOR for a user factory that returns no valid connector.
 */
export function createEngineConnectors(
  config: EngineSettings,
  offload: OffloadTiers | undefined,
  context: KvConnectorContext,
  user: readonly KvConnectorFactory[],
  onFailure: ConnectorFailure,
): EngineConnectors {
  const swap =
    offload && config.preemptionMode === 'swap'
      ? new SwapConnector({ device: context.device, store: offload.store })
      : undefined;
  // Off by default where prefix blocks would compete with swapped-out blocks for a single
  // budgeted tier: there, a prefix write could evict a block with no other copy.
  // A cache of several KV groups (sliding-window layers) has one block chain per group; the
  // tiers keep one: no prefix offload there.
  const prefixOffload =
    offload &&
    config.enablePrefixCaching &&
    context.kvCache.numGroups <= 1 &&
    (config.offloadPrefix ?? !(config.preemptionMode === 'swap' && isHostOnly(offload)))
      ? new PrefixOffloadConnector({ ...context, store: offload.store })
      : undefined;
  return new EngineConnectors(
    swap,
    prefixOffload,
    user.map((create) => validateKvConnector(create(context))),
    onFailure,
  );
}
