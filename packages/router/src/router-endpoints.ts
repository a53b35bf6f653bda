import type { ServerResponse } from 'node:http';
import type { HashKey } from './kv-event-decoder.js';
import { renderRouterMetrics } from './router-metrics.js';
import type { ReplicaState, RouterCounters } from './router-options.js';

/** What the router's own endpoints show (a `KvRouter`). */
export interface RouterView {
  readonly policy: { readonly name: string };
  readonly blockSize: number;
  readonly counters: RouterCounters;
  replicas(): ReplicaState[];
  /** The blocks each replica's events say it holds. */
  readonly index: { blocks(url: string): Iterable<HashKey> };
}

const json = (res: ServerResponse, status: number, body: unknown) => {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
};

/**
 * Answers `GET /health`, `/metrics`, `/router/replicas` and `/router/index`, the router's
 * own endpoints (everything else goes to a replica).
 * @returns false when `path` is not one of them.
 */
export function answerRouterEndpoint(
  method: string | undefined,
  path: string,
  res: ServerResponse,
  view: RouterView,
): boolean {
  if (method !== 'GET') return false;
  if (path === '/health') {
    const up = view.replicas().filter((r) => r.healthy).length;
    json(res, up > 0 ? 200 : 503, { status: up > 0 ? 'ok' : 'no healthy replica', replicas: up });
    return true;
  }
  if (path === '/metrics') {
    res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4; charset=utf-8' });
    res.end(renderRouterMetrics(view.replicas(), view.counters));
    return true;
  }
  if (path === '/router/replicas') {
    json(res, 200, {
      policy: view.policy.name,
      blockSize: view.blockSize,
      replicas: view.replicas(),
    });
    return true;
  }
  if (path === '/router/index') {
    // The index as events built it, per replica: for checks against the replicas' own state.
    json(res, 200, {
      replicas: view
        .replicas()
        .map((r) => ({ url: r.url, blocks: [...view.index.blocks(r.url)].sort() })),
    });
    return true;
  }
  return false;
}
