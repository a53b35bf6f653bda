import { Agent, request } from 'node:http';
import { RouterError } from './errors.js';

/** One replica as the router is told of it. */
export interface ReplicaSpec {
  /** Base URL of its OpenAI-compatible server: `http://127.0.0.1:8001`. */
  readonly url: string;
  /** Its KV events PUB endpoint (`kvasir serve --kv-events`); none: routed by load only. */
  readonly events?: string;
  /** Its replay/snapshot ROUTER endpoint (`--kv-events-replay`). */
  readonly replay?: string;
}

/**
 * Parses `http://host:port[,events=tcp://host:port][,replay=tcp://host:port]`, the form
 * `kvasir router --replica` takes.
 * @throws RouterError `INVALID_OPTIONS` naming what is malformed.
 */
export function parseReplicaSpec(text: string): ReplicaSpec {
  const [url, ...rest] = text.split(',');
  const spec: { url: string; events?: string; replay?: string } = { url: checkUrl(url ?? '') };
  for (const part of rest) {
    const eq = part.indexOf('=');
    const key = part.slice(0, eq);
    const value = part.slice(eq + 1);
    if (eq < 0 || (key !== 'events' && key !== 'replay')) {
      throw new RouterError(
        'INVALID_OPTIONS',
        `replica "${text}": "${part}" is not events=<endpoint> or replay=<endpoint>`,
      );
    }
    if (!/^(tcp|ipc|inproc):\/\/\S+$/.test(value)) {
      throw new RouterError(
        'INVALID_OPTIONS',
        `replica "${text}": ${key} must be a ZeroMQ endpoint such as tcp://127.0.0.1:5557, got "${value}"`,
      );
    }
    spec[key] = value;
  }
  if (spec.replay !== undefined && spec.events === undefined) {
    throw new RouterError('INVALID_OPTIONS', `replica "${text}": replay= needs events= too`);
  }
  return spec;
}

function checkUrl(text: string): string {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new RouterError(
      'INVALID_OPTIONS',
      `replica URL "${text}" is not a URL (http://host:port)`,
    );
  }
  if (url.protocol !== 'http:') {
    throw new RouterError('INVALID_OPTIONS', `replica URL "${text}" must be http://`);
  }
  return url.origin;
}

/**
 * A replica's live state in the router: health, the load the router itself put on it, and a
 * keep-alive connection pool. Load is counted by the router (it sees every request it sends),
 * so it is exact at once, without waiting for the replica's next `/metrics` scrape.
 */
export class Replica {
  readonly url: string;
  readonly index: number;
  readonly spec: ReplicaSpec;
  readonly agent = new Agent({ keepAlive: true, maxSockets: 256 });
  healthy = false;
  /** Set once the first health check answered (healthy or not). */
  checked = false;
  inFlight = 0;
  pendingPrefillBlocks = 0;
  activeBlocks = 0;
  routed = 0;
  failures = 0;

  constructor(spec: ReplicaSpec, index: number) {
    this.spec = spec;
    this.url = spec.url;
    this.index = index;
  }

  /**
   * Nothing listens there (a refused connection, or a health check reset): never tried until a
   * health check passes. A replica out only for slow health checks is still tried when no
   * healthy one is left (it is busy, not gone).
   */
  down = false;
  /** Health checks failed in a row (a slow answer counts; the router decides when to give up). */
  consecutiveFailures = 0;
  /** A health check is in flight (the next one waits for it). */
  probing = false;

  /**
   * `GET /health`: `ok` on 200 within `timeoutMs`; `down` when nothing listens (refused, reset:
   * the process is gone); `failed` for a timeout or another status (busy or draining).
   */
  probe(timeoutMs: number): Promise<'ok' | 'down' | 'failed'> {
    return new Promise((resolve) => {
      let timedOut = false;
      const req = request(
        `${this.url}/health`,
        { agent: this.agent, timeout: timeoutMs },
        (res) => {
          res.resume();
          resolve(res.statusCode === 200 ? 'ok' : 'failed');
        },
      );
      req.on('timeout', () => {
        timedOut = true;
        req.destroy();
      });
      req.on('error', (error: NodeJS.ErrnoException) => {
        const gone = !timedOut && (error.code === 'ECONNREFUSED' || error.code === 'ECONNRESET');
        resolve(gone ? 'down' : 'failed');
      });
      req.end();
    });
  }

  close(): void {
    this.agent.destroy();
  }
}
