import type { ReplicaCandidate, RoutingPolicy, RoutingRequest } from './routing-policy.js';

/**
 * `x-kvasir-route` (with `explainRoutes`): what the policy saw and chose, as JSON. Per
 * candidate `[index, cached, predicted, inFlight, pendingPrefill, active]`: its cached prefix in
 * blocks, of it the blocks only predicted (a request just sent there, its events not in yet),
 * and its load. Compared with the `cached_tokens` the replica reports, it shows whether the
 * index was right and whether the policy followed it.
 */
export function routeExplanation(
  policy: RoutingPolicy,
  request: RoutingRequest,
  views: readonly ReplicaCandidate[],
  predicted: readonly number[],
  chosen: ReplicaCandidate,
): string {
  return JSON.stringify({
    promptBlocks: request.promptBlocks,
    chosen: chosen.index,
    why: policy.explain?.(request, chosen),
    candidates: views.map((v, i) => [
      v.index,
      v.cachedBlocks,
      predicted[i] ?? 0,
      v.inFlight,
      v.pendingPrefillBlocks,
      v.activeBlocks,
    ]),
    // A header holds printable ASCII only; a plug-in's explanation may not.
  }).replace(/[^\x20-\x7e]/g, '?');
}
