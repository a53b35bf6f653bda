import { RouterError } from './errors.js';

/** The version of the {@link RoutingPolicy} contract this package implements. */
export const ROUTING_POLICY_SPECIFICATION_VERSION = 'v1';

/** What a policy knows of one request. */
export interface RoutingRequest {
  /** `completion` or `chat`. */
  readonly kind: 'completion' | 'chat';
  /** The `model` of the body. */
  readonly model: string;
  /** Full blocks of the prompt (0 when it could not be tokenized). */
  readonly promptBlocks: number;
  /** Prompt tokens (0 when unknown). */
  readonly promptTokens: number;
  /** Tokens it may generate (`max_tokens`, 16 when absent). */
  readonly maxTokens: number;
}

/** What a policy knows of one candidate replica: healthy, not yet tried for this request. */
export interface ReplicaCandidate {
  /** The replica's base URL, as given to the router. */
  readonly url: string;
  /** Its place in the router's list (stable: round-robin orders by it). */
  readonly index: number;
  /** Requests the router has in flight on it. */
  readonly inFlight: number;
  /** Prompt blocks of those requests still to be prefilled (no byte answered yet). */
  readonly pendingPrefillBlocks: number;
  /**
   * Blocks those requests add to the replica's cache: the prompt blocks it lacked and the
   * blocks their tokens will fill (a cached prefix is held once, however many requests share it).
   */
  readonly activeBlocks: number;
  /** Leading prompt blocks the replica holds, by its KV events (and the router's predictions). */
  readonly cachedBlocks: number;
  /** The same blocks each weighted by its tier (GPU 1, host 0.8, ...): prefill it saves. */
  readonly cachedWeighted: number;
  /**
   * Blocks the replica holds by its events, all prompts (a full cache holds its pool's size);
   * absent from candidates made by hand.
   */
  readonly indexedBlocks?: number;
}

/**
 * Picks the replica for a request among healthy candidates. Write one with
 * {@link defineRoutingPolicy}; the router computes the prefix overlap and load of every
 * candidate before calling it, so a policy is a pure choice.
 *
 * Contract (`v1`): `choose` returns one of the candidates it was given (the object or its
 * `url`) and may keep state of its own (a round-robin cursor). It is called with at least one
 * candidate. A policy that throws or returns anything else fails that request's choice with
 * `POLICY_FAILED`, and the router falls back to the least-loaded candidate.
 */
export interface RoutingPolicy {
  /** The contract version the policy was written against; `'v1'`. */
  readonly specificationVersion: typeof ROUTING_POLICY_SPECIFICATION_VERSION;
  /** Name for logs and metrics. */
  readonly name: string;
  choose(
    request: RoutingRequest,
    candidates: readonly ReplicaCandidate[],
  ): ReplicaCandidate | string;
  /** Optional: one line saying why the last choice was made (for `x-kvasir-route` and logs). */
  explain?(request: RoutingRequest, chosen: ReplicaCandidate): string;
}

/** The hooks of a {@link RoutingPolicy}, as {@link defineRoutingPolicy} takes them. */
export type RoutingPolicyHooks = Omit<RoutingPolicy, 'specificationVersion'>;

/**
 * Makes a {@link RoutingPolicy} from its hooks, stamped with the contract version.
 *
 * @example
 * ```ts
 * // The replica holding the longest cached prefix, load ignored.
 * const longestPrefix = defineRoutingPolicy({
 *   name: 'longest-prefix',
 *   choose: (_request, candidates) =>
 *     candidates.reduce((a, b) => (b.cachedWeighted > a.cachedWeighted ? b : a)),
 * });
 * ```
 * @throws {RouterError} INVALID_POLICY naming a missing hook.
 */
export function defineRoutingPolicy(hooks: RoutingPolicyHooks): RoutingPolicy {
  return validateRoutingPolicy({
    ...hooks,
    specificationVersion: ROUTING_POLICY_SPECIFICATION_VERSION,
  });
}

/**
 * Checks that `value` is a {@link RoutingPolicy} of a version this package implements (a
 * policy loaded from a user's module, say) and returns it typed.
 * @throws {RouterError} INVALID_POLICY naming what is missing or the unsupported version.
 */
export function validateRoutingPolicy(value: unknown): RoutingPolicy {
  if (typeof value !== 'object' || value === null) {
    throw new RouterError('INVALID_POLICY', 'a routing policy must be an object');
  }
  const v = value as Record<string, unknown>;
  if (v.specificationVersion !== ROUTING_POLICY_SPECIFICATION_VERSION) {
    throw new RouterError(
      'INVALID_POLICY',
      v.specificationVersion === undefined
        ? `routing policy has no specificationVersion: make it with defineRoutingPolicy() (or set specificationVersion: '${ROUTING_POLICY_SPECIFICATION_VERSION}')`
        : `routing policy specificationVersion ${JSON.stringify(v.specificationVersion)} is not supported (this version implements '${ROUTING_POLICY_SPECIFICATION_VERSION}')`,
      { details: { specificationVersion: v.specificationVersion } },
    );
  }
  if (typeof v.name !== 'string' || v.name === '') {
    throw new RouterError('INVALID_POLICY', 'routing policy needs a non-empty name');
  }
  if (typeof v.choose !== 'function') {
    throw new RouterError(
      'INVALID_POLICY',
      `routing policy ${v.name} is missing the function "choose"`,
      {
        details: { hook: 'choose' },
      },
    );
  }
  if (v.explain !== undefined && typeof v.explain !== 'function') {
    throw new RouterError('INVALID_POLICY', `routing policy ${v.name}: explain must be a function`);
  }
  return value as unknown as RoutingPolicy;
}
