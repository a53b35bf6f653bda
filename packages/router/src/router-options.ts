import type { BlockHash } from '@kvasir/kv-allocator';
import { RouterError } from './errors.js';
import type { BuiltinRoutingName, CacheAwareOptions } from './policies.js';
import type { TierWeights } from './prefix-index.js';
import type { PromptTokenizer } from './prompt.js';
import type { ReplicaSpec } from './replica.js';
import type { RoutingPolicy } from './routing-policy.js';

/** Options of {@link KvRouter}. */
export interface KvRouterOptions {
  /** The replicas (at least one), each with its KV events endpoints when it publishes them. */
  readonly replicas: readonly ReplicaSpec[];
  /** A built-in policy by name, or a {@link RoutingPolicy} (default `cache-aware`). */
  readonly policy?: BuiltinRoutingName | RoutingPolicy;
  /** Dynamo's `overlap_weight` for `kv-aware` (default 1). */
  readonly overlapWeight?: number;
  /** The thresholds of `cache-aware` (the SGLang gateway's defaults: 0.3, 64, 1.5). */
  readonly cacheAware?: CacheAwareOptions;
  /** The model's tokenizer; without it only token-id prompts are matched against caches. */
  readonly tokenizer?: PromptTokenizer;
  /**
   * Tokens per KV block, as the replicas run (default: the `block_size` of their first
   * `BlockStored` event, 16 until one arrives).
   */
  readonly blockSize?: number;
  /** The root of the replicas' hash chain for a model (default {@link engineChainRoot}). */
  readonly chainRoot?: (model: string) => BlockHash;
  readonly tierWeights?: TierWeights;
  /** Media every replica can read (a Redis all replicas share), e.g. `['REDIS']`. */
  readonly sharedMedia?: readonly string[];
  /** Interface and port to listen on (default 127.0.0.1:8080; port 0 = any free port). */
  readonly host?: string;
  readonly port?: number;
  /** `GET /health` of every replica this often (default 1 s). */
  readonly healthIntervalMs?: number;
  /** A health check slower than this fails (default 5 s). */
  readonly healthTimeoutMs?: number;
  /**
   * Failed health checks in a row (timeouts, non-200) before a replica is taken out (default
   * 3): a replica busy with a long step answers late, and is not dead. A refused connection
   * takes it out at once.
   */
  readonly unhealthyAfter?: number;
  /** How long a routed request's blocks count as on its replica before events confirm (default 10 s). */
  readonly predictionTtlMs?: number;
  /**
   * Adds `x-kvasir-route` to each routed response: the prompt's blocks and, per candidate, the
   * cached prefix the router saw (of it, blocks only predicted) and the load, as JSON. For
   * checking routing against what the replicas report (`cached_tokens`). Default off.
   */
  readonly explainRoutes?: boolean;
  /** Largest request body (default 16 MiB; 413 beyond). */
  readonly maxBodyBytes?: number;
  readonly log?: (line: string) => void;
}

/** A replica's state, as `GET /router/replicas` and {@link KvRouter.replicas} give it. */
export interface ReplicaState {
  readonly url: string;
  readonly healthy: boolean;
  readonly inFlight: number;
  readonly pendingPrefillBlocks: number;
  readonly activeBlocks: number;
  readonly routed: number;
  readonly failures: number;
  readonly indexedBlocks: number;
  readonly events: {
    readonly batches: number;
    readonly snapshots: number;
    readonly replayed: number;
    readonly sequence: string;
  } | null;
}

/** Router-wide counters. */
export interface RouterCounters {
  requests: number;
  retries: number;
  noReplica: number;
  brokenStreams: number;
  policyFailures: number;
  promptBlocks: number;
  cachedBlocks: number;
}

/**
 * Checks what the router cannot run with, before anything starts.
 * @throws RouterError `INVALID_OPTIONS` naming the option: no replica, a duplicate, or a block
 *   size or health threshold that is not a positive integer.
 */
export function checkRouterOptions(options: KvRouterOptions): void {
  if (options.replicas.length === 0) {
    throw new RouterError('INVALID_OPTIONS', 'a router needs at least one replica');
  }
  const urls = new Set<string>();
  for (const r of options.replicas) {
    if (urls.has(r.url))
      throw new RouterError('INVALID_OPTIONS', `replica ${r.url} is listed twice`);
    urls.add(r.url);
  }
  for (const key of ['blockSize', 'unhealthyAfter'] as const) {
    const n = options[key];
    if (n !== undefined && !(Number.isInteger(n) && n > 0)) {
      throw new RouterError('INVALID_OPTIONS', `${key} must be a positive integer, got ${n}`);
    }
  }
}
