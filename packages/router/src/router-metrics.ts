import type { ReplicaState, RouterCounters } from './router.js';

const esc = (s: string) => s.replaceAll('\\', '\\\\').replaceAll('"', '\\"');

/** The router's `/metrics`, in Prometheus' text format. */
export function renderRouterMetrics(replicas: readonly ReplicaState[], c: RouterCounters): string {
  const lines: string[] = [];
  const metric = (
    name: string,
    type: 'gauge' | 'counter',
    help: string,
    values: readonly [Record<string, string>, number][],
  ) => {
    lines.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`);
    for (const [labels, value] of values) {
      const l = Object.entries(labels).map(([k, v]) => `${k}="${esc(v)}"`);
      lines.push(`${name}${l.length > 0 ? `{${l.join(',')}}` : ''} ${value}`);
    }
  };
  const per = (f: (r: ReplicaState) => number) =>
    replicas.map((r): [Record<string, string>, number] => [{ replica: r.url }, f(r)]);
  metric(
    'kvasir_router_replica_up',
    'gauge',
    '1 while the replica passes its health checks.',
    per((r) => (r.healthy ? 1 : 0)),
  );
  metric(
    'kvasir_router_replica_in_flight',
    'gauge',
    'Requests the router has in flight on the replica.',
    per((r) => r.inFlight),
  );
  metric(
    'kvasir_router_replica_indexed_blocks',
    'gauge',
    'Blocks the replica holds according to its KV events.',
    per((r) => r.indexedBlocks),
  );
  metric(
    'kvasir_router_routed_total',
    'counter',
    'Requests answered by the replica.',
    per((r) => r.routed),
  );
  metric(
    'kvasir_router_replica_failures_total',
    'counter',
    'Requests the replica failed (refused, reset, broke a stream).',
    per((r) => r.failures),
  );
  metric('kvasir_router_requests_total', 'counter', 'Completions and chat requests received.', [
    [{}, c.requests],
  ]);
  metric(
    'kvasir_router_retries_total',
    'counter',
    'Requests moved to another replica before any byte reached the client.',
    [[{}, c.retries]],
  );
  metric(
    'kvasir_router_no_replica_total',
    'counter',
    'Requests answered 503 because no replica could take them.',
    [[{}, c.noReplica]],
  );
  metric(
    'kvasir_router_broken_streams_total',
    'counter',
    'Responses a replica broke after their first byte.',
    [[{}, c.brokenStreams]],
  );
  metric('kvasir_router_prompt_blocks_total', 'counter', 'Full prompt blocks of routed requests.', [
    [{}, c.promptBlocks],
  ]);
  metric(
    'kvasir_router_cached_blocks_total',
    'counter',
    'Of those, blocks the chosen replica held (by its events) when routed.',
    [[{}, c.cachedBlocks]],
  );
  return `${lines.join('\n')}\n`;
}
