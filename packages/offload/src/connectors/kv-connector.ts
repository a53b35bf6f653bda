import type { BlockId, ExtraKeys, KvCacheManager } from '@kvasir/kv-allocator';
import { OffloadError } from '../errors.js';

/** The version of the {@link KvConnector} contract this package implements. */
export const KV_CONNECTOR_SPECIFICATION_VERSION = 'v1';

/** A block moved between the device and a swap slot (`BatchPlan.swapOut` / `swapIn`). */
export interface KvSwapTransfer {
  readonly requestId: string;
  /** The device block read (swap-out) or written (swap-in). */
  readonly gpuBlock: BlockId;
  /** The host slot the scheduler assigned; the same slot names the block on its way back. */
  readonly hostSlot: number;
}

/** One row of a step: a request's tokens computed this step. */
export interface KvConnectorRow {
  readonly requestId: string;
  /** Tokens of the request in the cache once the step has run. */
  readonly contextLen: number;
  /** Tokens computed this step (the last `queryLen` of `contextLen`). */
  readonly queryLen: number;
  /** The request's physical blocks, in logical order. */
  readonly blockTable: ArrayLike<BlockId>;
}

/**
 * What a connector sees of an engine step: the rows computed and the swaps to perform. A
 * `BatchPlan` of `@kvasir/scheduler` is one; the contract names only what connectors read, so
 * the plan can grow without breaking them.
 */
export interface KvConnectorStep {
  readonly rows: readonly KvConnectorRow[];
  readonly swapOut: readonly KvSwapTransfer[];
  readonly swapIn: readonly KvSwapTransfer[];
}

/** The device cache, as connectors move blocks through it (the engine's model runner). */
export interface KvBlockIo {
  /** Bytes of one block over all layers: what `readBlocks` returns per block. */
  readonly blockBytes: number;
  /** Reads blocks' bytes; queued after any forward pass already submitted. */
  readBlocks(blocks: readonly BlockId[]): Promise<Uint8Array[]>;
  /** Writes blocks' bytes (each `blockBytes` long). */
  writeBlocks(blocks: readonly BlockId[], data: readonly Uint8Array[]): Promise<void>;
}

/** What the engine gives a connector it creates (see {@link KvConnectorFactory}). */
export interface KvConnectorContext {
  /** The allocator: prefix lookups, block hashes, and `reserveExternal` to import blocks. */
  readonly kvCache: KvCacheManager;
  /** The device blocks, to read and write. */
  readonly device: KvBlockIo;
  /** The keys the engine hashes its requests' prefixes with. */
  readonly extraKeys: ExtraKeys;
  /** Wakes the engine loop so that `betweenSteps` runs soon. */
  readonly wake: () => void;
}

/** A request as a connector sees it at admission. */
export interface KvConnectorRequest {
  readonly requestId: string;
  readonly promptTokens: readonly number[];
}

/**
 * Moves KV blocks between the engine's device cache and storage outside it (swap to host, prefix
 * blocks to and from disk, Redis, another replica). Write one with {@link defineKvConnector};
 * the engine creates it from a {@link KvConnectorFactory}.
 *
 * Contract (`v1`), after vLLM's `KVConnectorBase_V1`. The scheduler side runs at admission and
 * between steps, when nothing is in flight: `onAdmit` finds what storage holds of the prompt
 * beyond the local prefix cache and reports the tokens it brought in; work that changes the
 * allocator (importing blocks with `reserveExternal` / `commitExternal`) runs in `betweenSteps`,
 * which the engine calls while `hasPendingWork` is true. The worker side runs around each
 * forward pass: `beforeForward` performs the step's block moves (swaps) and `afterForward`
 * keeps what the step computed (not awaited: reads are queued on the device after the pass).
 *
 * The failure rule: a storage failure is a miss and a recompute, never thrown into a request,
 * except in `beforeForward`, where a block that cannot be moved fails the step (and a swapped
 * block that is lost ends its request, reported in the returned set). Every block reserved is
 * committed or aborted: a connector leaks none.
 */
export interface KvConnector {
  /** The contract version the connector was written against; `'v1'`. */
  readonly specificationVersion: typeof KV_CONNECTOR_SPECIFICATION_VERSION;
  /** Name for logs and stats. */
  readonly name: string;
  /**
   * Scheduler side, before the request is queued: looks its prompt up outside the cache and
   * resolves once what was found is in the cache (imported in `betweenSteps`). Resolves to the
   * prompt tokens this brought into the prefix cache (0 for none); never rejects.
   */
  onAdmit?(request: KvConnectorRequest): Promise<number>;
  /** True while `betweenSteps` has work: the engine loop stays awake for it. */
  readonly hasPendingWork?: boolean;
  /** Scheduler side: runs between steps, when no plan is scheduled or running. */
  betweenSteps?(): Promise<void>;
  /**
   * Worker side: performs the step's block moves before its forward pass. Resolves to the
   * requests whose KV could not be restored (they end with an error, never wrong text).
   */
  beforeForward?(step: KvConnectorStep): Promise<ReadonlySet<string> | undefined>;
  /** Worker side: sees the step after its forward pass was queued (not awaited). */
  afterForward?(step: KvConnectorStep): void;
  /** Drops pending work and waits for writes in flight. Idempotent. */
  close(): Promise<void>;
}

/** Makes the connector of one engine; called once, when the engine is built. */
export type KvConnectorFactory = (context: KvConnectorContext) => KvConnector;

/** The members of a {@link KvConnector}, as {@link defineKvConnector} takes them. */
export type KvConnectorHooks = Omit<KvConnector, 'specificationVersion'>;

const HOOKS = ['onAdmit', 'betweenSteps', 'beforeForward', 'afterForward'] as const;

/**
 * Makes a {@link KvConnector} from its hooks, stamped with the contract version. Getters (a
 * `hasPendingWork` that reads state) stay getters.
 *
 * @example
 * ```ts
 * // Counts the blocks each step computes: a connector with one worker-side hook.
 * let rows = 0;
 * const counter = defineKvConnector({
 *   name: 'row-counter',
 *   afterForward: (step) => {
 *     rows += step.rows.length;
 *   },
 *   close: async () => {},
 * });
 * ```
 * @throws {OffloadError} INVALID_CONNECTOR naming what is missing or malformed.
 */
export function defineKvConnector(hooks: KvConnectorHooks): KvConnector {
  const connector = Object.defineProperties(
    { specificationVersion: KV_CONNECTOR_SPECIFICATION_VERSION },
    Object.getOwnPropertyDescriptors(hooks),
  );
  return validateKvConnector(connector);
}

/**
 * Checks that `value` is a {@link KvConnector} of a version this package implements (one a
 * user's factory returned, say) and returns it typed.
 * @throws {OffloadError} INVALID_CONNECTOR naming what is missing or the unsupported version.
 */
export function validateKvConnector(value: unknown): KvConnector {
  const fail = (message: string, details?: Record<string, unknown>): never => {
    throw new OffloadError('INVALID_CONNECTOR', message, details ? { details } : {});
  };
  if (typeof value !== 'object' || value === null) fail('a KV connector must be an object');
  const v = value as Record<string, unknown>;
  if (v.specificationVersion !== KV_CONNECTOR_SPECIFICATION_VERSION) {
    fail(
      v.specificationVersion === undefined
        ? `KV connector has no specificationVersion: make it with defineKvConnector() (or set specificationVersion: '${KV_CONNECTOR_SPECIFICATION_VERSION}')`
        : `KV connector specificationVersion ${JSON.stringify(v.specificationVersion)} is not supported (this version implements '${KV_CONNECTOR_SPECIFICATION_VERSION}')`,
      { specificationVersion: v.specificationVersion },
    );
  }
  if (typeof v.name !== 'string' || v.name === '') fail('KV connector needs a non-empty name');
  if (typeof v.close !== 'function') {
    fail(`KV connector ${v.name} is missing the function "close"`, { hook: 'close' });
  }
  for (const hook of HOOKS) {
    if (v[hook] !== undefined && typeof v[hook] !== 'function') {
      fail(`KV connector ${v.name}: ${hook} must be a function`, { hook });
    }
  }
  const pending = v.hasPendingWork;
  if (pending !== undefined && typeof pending !== 'boolean') {
    fail(`KV connector ${v.name}: hasPendingWork must be a boolean`, { hook: 'hasPendingWork' });
  }
  if (pending !== undefined && v.betweenSteps === undefined) {
    fail(`KV connector ${v.name} reports hasPendingWork but has no betweenSteps to do it`, {
      hook: 'betweenSteps',
    });
  }
  return value as KvConnector;
}
