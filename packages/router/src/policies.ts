import { RouterError } from './errors.js';
import {
  defineRoutingPolicy,
  type ReplicaCandidate,
  type RoutingPolicy,
  type RoutingRequest,
} from './routing-policy.js';

/** The built-in policies, by the name `--routing` takes. */
export type BuiltinRoutingName = 'kv-aware' | 'cache-aware' | 'round-robin' | 'least-loaded';

/** Options of {@link kvAwarePolicy}. */
export interface KvAwareOptions {
  /**
   * What a block to prefill costs against a block being decoded (Dynamo's `overlap_weight`,
   * default 1): higher favours cache hits, lower favours spreading load.
   */
  readonly overlapWeight?: number;
}

/** Rotates ties so equal replicas share the work instead of the first one taking it all. */
function tieBreaker(): (best: ReplicaCandidate[]) => ReplicaCandidate {
  let turn = 0;
  return (best) => {
    const chosen = best[turn % best.length]!;
    turn++;
    return chosen;
  };
}

/**
 * KV-aware routing, after NVIDIA Dynamo's KV router: the replica of lowest
 * `cost = overlapWeight × prefill blocks + decode blocks`, where prefill blocks are the
 * prompt's blocks the replica lacks (a block in a lower tier counts as its missing fraction:
 * a host block weighs 0.8, so it costs 0.2 of a recompute) plus the prefill it already has
 * queued, and decode blocks the blocks its running requests add to its cache (a cached prefix
 * counts once, as the engine holds it once).
 *
 * Why this over llm-d's weighted sum of scorers (prefix, queue, KV use): both terms are in one
 * unit, blocks of work, so cache affinity and load trade off without scaling scores of different
 * kinds against each other, and a hot shared prompt cannot pile every request on one replica
 * (the vLLM production-stack hot-spot): once its queue costs more than the prefill it saves,
 * the next replica wins. llm-d's tier weights are kept, inside the prefill term.
 */
export function kvAwarePolicy(options: KvAwareOptions = {}): RoutingPolicy {
  const w = options.overlapWeight ?? 1;
  const cost = (r: RoutingRequest, c: ReplicaCandidate) =>
    w * (Math.max(0, r.promptBlocks - c.cachedWeighted) + c.pendingPrefillBlocks) + c.activeBlocks;
  const tie = tieBreaker();
  return defineRoutingPolicy({
    name: 'kv-aware',
    choose(request, candidates) {
      let best: ReplicaCandidate[] = [];
      let bestCost = Number.POSITIVE_INFINITY;
      for (const c of candidates) {
        const k = cost(request, c);
        // Equal cost: fewer requests in flight first, then take turns.
        if (
          k < bestCost - 1e-9 ||
          (Math.abs(k - bestCost) <= 1e-9 && c.inFlight < best[0]!.inFlight)
        ) {
          best = [c];
          bestCost = k;
        } else if (Math.abs(k - bestCost) <= 1e-9 && c.inFlight === best[0]!.inFlight) {
          best.push(c);
        }
      }
      return tie(best);
    },
    explain(request, c) {
      return `kv-aware: ${c.cachedBlocks}/${request.promptBlocks} prompt blocks cached (weighted ${c.cachedWeighted.toFixed(1)}), cost ${cost(request, c).toFixed(1)} = ${w} x (${Math.max(0, request.promptBlocks - c.cachedWeighted).toFixed(1)} + ${c.pendingPrefillBlocks} queued) + ${c.activeBlocks} active`;
    },
  });
}

/** Options of {@link cacheAwarePolicy} (the SGLang model gateway's names and defaults). */
export interface CacheAwareOptions {
  /**
   * Share of the prompt's blocks (weighted by tier) the best replica must hold for the cache to
   * decide (default 0.3); below it the prompt is new, and goes to the fewest requests in flight,
   * then where the index holds the fewest blocks (the most room).
   */
  readonly cacheThreshold?: number;
  /**
   * Load decides instead of the cache only when the replicas are out of balance: the busiest
   * has more than `balanceAbsThreshold` requests in flight beyond the idlest (default 64) and
   * more than `balanceRelThreshold` times as many (default 1.5).
   */
  readonly balanceAbsThreshold?: number;
  readonly balanceRelThreshold?: number;
}

/**
 * Cache-aware routing (the router's default), after the SGLang model gateway's default policy: the cache decides unless
 * the replicas are out of balance. A prompt whose best cached share reaches `cacheThreshold`
 * goes to the replica holding most of it (ties: fewest in flight, then in turn); a new prompt
 * goes to the fewest in flight, then where the index holds the fewest blocks (SGLang takes the
 * smallest cache first; its tree grows as it routes, while this index grows only when events
 * come, so a burst of new prompts would pile on one replica); while the busiest replica is more than
 * `balanceAbsThreshold` requests and `balanceRelThreshold` times ahead of the idlest, every
 * request goes to the idlest.
 *
 * Against {@link kvAwarePolicy}: load never outweighs a cache hit on balanced replicas, so a
 * shared prompt stays on its replica while the others are as busy (the right trade where
 * replicas share compute, or where a recompute costs more than a short queue); the imbalance
 * guard still keeps a hot prompt from piling everything on one replica.
 * @throws RouterError `INVALID_OPTIONS` for a threshold out of its range.
 */
export function cacheAwarePolicy(options: CacheAwareOptions = {}): RoutingPolicy {
  const threshold = options.cacheThreshold ?? 0.3;
  const abs = options.balanceAbsThreshold ?? 64;
  const rel = options.balanceRelThreshold ?? 1.5;
  const bad = (what: string, value: number) => {
    throw new RouterError('INVALID_OPTIONS', `cache-aware: ${what}, got ${value}`);
  };
  if (!(threshold >= 0 && threshold <= 1)) bad('cacheThreshold must be from 0 to 1', threshold);
  if (!(abs >= 0 && Number.isFinite(abs))) bad('balanceAbsThreshold must be a number ≥ 0', abs);
  if (!(rel >= 1 && Number.isFinite(rel))) bad('balanceRelThreshold must be a number ≥ 1', rel);
  const tie = tieBreaker();
  /** The candidates of best `key` (higher first), then fewest in flight. */
  const best = (candidates: readonly ReplicaCandidate[], key: (c: ReplicaCandidate) => number) => {
    let out: ReplicaCandidate[] = [];
    for (const c of candidates) {
      const b = out[0];
      const k = b === undefined ? 0 : key(c) - key(b);
      if (b === undefined || k > 1e-9 || (Math.abs(k) <= 1e-9 && c.inFlight < b.inFlight)) {
        out = [c];
      } else if (Math.abs(k) <= 1e-9 && c.inFlight === b.inFlight) {
        out.push(c);
      }
    }
    return out;
  };
  const share = (r: RoutingRequest, c: ReplicaCandidate) =>
    r.promptBlocks === 0 ? 0 : c.cachedWeighted / r.promptBlocks;
  const mode = (r: RoutingRequest, candidates: readonly ReplicaCandidate[]) => {
    const loads = candidates.map((c) => c.inFlight);
    const max = Math.max(...loads);
    const min = Math.min(...loads);
    if (max - min > abs && max > rel * min) return 'balance';
    return Math.max(...candidates.map((c) => share(r, c))) >= threshold ? 'cache' : 'new';
  };
  return defineRoutingPolicy({
    name: 'cache-aware',
    choose(request, candidates) {
      const m = mode(request, candidates);
      if (m === 'balance') return tie(best(candidates, (c) => -c.inFlight));
      if (m === 'cache') return tie(best(candidates, (c) => c.cachedWeighted));
      // A new prompt: the fewest in flight, then the most room.
      const idle = best(candidates, (c) => -c.inFlight);
      return tie(best(idle, (c) => -(c.indexedBlocks ?? 0)));
    },
    explain(request, c) {
      return `cache-aware: ${c.cachedBlocks}/${request.promptBlocks} prompt blocks cached (weighted ${c.cachedWeighted.toFixed(1)}), ${c.inFlight} in flight, ${c.indexedBlocks ?? 0} blocks indexed`;
    },
  });
}

/** Each healthy replica in turn, blind to caches and load: the baseline to compare with. */
export function roundRobinPolicy(): RoutingPolicy {
  let last = -1;
  return defineRoutingPolicy({
    name: 'round-robin',
    choose(_request, candidates) {
      const sorted = [...candidates].sort((a, b) => a.index - b.index);
      const next = sorted.find((c) => c.index > last) ?? sorted[0]!;
      last = next.index;
      return next;
    },
    explain: (_request, c) => `round-robin: replica ${c.index}`,
  });
}

/** The replica with the fewest requests in flight (then the fewest active blocks). */
export function leastLoadedPolicy(): RoutingPolicy {
  const tie = tieBreaker();
  return defineRoutingPolicy({
    name: 'least-loaded',
    choose(_request, candidates) {
      let best: ReplicaCandidate[] = [];
      for (const c of candidates) {
        const b = best[0];
        if (
          b === undefined ||
          c.inFlight < b.inFlight ||
          (c.inFlight === b.inFlight && c.activeBlocks < b.activeBlocks)
        ) {
          best = [c];
        } else if (c.inFlight === b.inFlight && c.activeBlocks === b.activeBlocks) {
          best.push(c);
        }
      }
      return tie(best);
    },
    explain: (_request, c) =>
      `least-loaded: ${c.inFlight} in flight, ${c.activeBlocks} active blocks`,
  });
}

/**
 * A built-in policy by name.
 * @throws RouterError `INVALID_OPTIONS` for `cache-aware` thresholds out of their range.
 */
export function builtinRoutingPolicy(
  name: BuiltinRoutingName,
  options: KvAwareOptions & CacheAwareOptions = {},
): RoutingPolicy {
  if (name === 'cache-aware') return cacheAwarePolicy(options);
  if (name === 'round-robin') return roundRobinPolicy();
  if (name === 'least-loaded') return leastLoadedPolicy();
  return kvAwarePolicy(options);
}
