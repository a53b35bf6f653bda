import {
  createServer,
  request as httpRequest,
  type IncomingHttpHeaders,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from 'node:http';
import type { AddressInfo } from 'node:net';
import type { BlockHash } from '@kvasir/kv-allocator';
import { engineChainRoot, promptBlockHashes } from './block-hashes.js';
import { RouterError } from './errors.js';
import type { KvEventBatch } from './kv-event-decoder.js';
import { KvEventSubscriber } from './kv-event-subscriber.js';
import { type BuiltinRoutingName, builtinRoutingPolicy, leastLoadedPolicy } from './policies.js';
import { PrefixIndex, type TierWeights } from './prefix-index.js';
import { type PromptTokenizer, promptOf } from './prompt.js';
import { Replica, type ReplicaSpec } from './replica.js';
import { renderRouterMetrics } from './router-metrics.js';
import type { ReplicaCandidate, RoutingPolicy, RoutingRequest } from './routing-policy.js';

/** Options of {@link KvRouter}. */
export interface KvRouterOptions {
  /** The replicas (at least one), each with its KV events endpoints when it publishes them. */
  readonly replicas: readonly ReplicaSpec[];
  /** A built-in policy by name, or a {@link RoutingPolicy} (default `kv-aware`). */
  readonly policy?: BuiltinRoutingName | RoutingPolicy;
  /** Dynamo's `overlap_weight` for `kv-aware` (default 1). */
  readonly overlapWeight?: number;
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

const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-authenticate',
  'proxy-authorization',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'host',
  'content-length',
]);

/** Answers a replica may give that another replica could do better with (full queue, draining). */
const RETRY_STATUSES = new Set([429, 502, 503]);

function forwardHeaders(headers: IncomingHttpHeaders): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const [k, v] of Object.entries(headers)) {
    if (v !== undefined && !HOP_BY_HOP.has(k)) out[k] = v;
  }
  return out;
}

/** `max_tokens` (or chat's `max_completion_tokens`) of a body, 16 when absent or malformed. */
function maxTokensOf(body: unknown): number {
  const b = (typeof body === 'object' && body !== null ? body : {}) as Record<string, unknown>;
  const n = b.max_completion_tokens ?? b.max_tokens;
  return typeof n === 'number' && Number.isFinite(n) && n >= 0 ? n : 16;
}

function errorBody(message: string, code: string, type = 'server_error'): string {
  return JSON.stringify({ error: { message, type, param: null, code } });
}

/** What one attempt on one replica came to. */
type Attempt =
  | { readonly kind: 'done' }
  /** Nothing reached the client: another replica may take the request. */
  | {
      readonly kind: 'retry';
      readonly status?: number;
      readonly headers?: IncomingHttpHeaders;
      readonly body?: Buffer;
      readonly reason: string;
    };

/**
 * `kvasir router`'s engine: an OpenAI-compatible HTTP front for several replicas that routes
 * each completions or chat request by prefix overlap and load, and passes everything else
 * through.
 *
 * - KV events: one {@link KvEventSubscriber} per replica feeds a {@link PrefixIndex} (snapshot
 *   at start, replay after gaps, resync after restarts).
 * - A request: its prompt tokenized as the replicas do, its full blocks chain-hashed as the
 *   engine does, each healthy replica's cached prefix and load given to the policy.
 * - Faults: replicas are health-checked; one that refuses a connection is taken out at once. A
 *   request nothing of which reached the client yet (refused, reset, 429/503, a stream whose
 *   first byte had not come) is retried on another replica; a stream that broke after its
 *   first byte ends with an OpenAI error event and `[DONE]`.
 * - Responses pass through unchanged (status, headers, SSE bytes), plus `x-kvasir-replica`.
 */
export class KvRouter {
  readonly #options: KvRouterOptions;
  readonly #replicas: Replica[];
  readonly #subscribers = new Map<Replica, KvEventSubscriber>();
  readonly #policy: RoutingPolicy;
  readonly #fallback = leastLoadedPolicy();
  readonly #log: (line: string) => void;
  readonly #server: Server;
  #timer: NodeJS.Timeout | undefined;
  #blockSize: number;
  #closed = false;
  /** What events said, and what the router predicts from the requests it sent. */
  readonly index: PrefixIndex;
  readonly counters: RouterCounters = {
    requests: 0,
    retries: 0,
    noReplica: 0,
    brokenStreams: 0,
    policyFailures: 0,
    promptBlocks: 0,
    cachedBlocks: 0,
  };

  /** @throws RouterError `INVALID_OPTIONS` for no replica, a duplicate, or a bad option. */
  constructor(options: KvRouterOptions) {
    if (options.replicas.length === 0) {
      throw new RouterError('INVALID_OPTIONS', 'a router needs at least one replica');
    }
    const urls = new Set<string>();
    for (const r of options.replicas) {
      if (urls.has(r.url))
        throw new RouterError('INVALID_OPTIONS', `replica ${r.url} is listed twice`);
      urls.add(r.url);
    }
    if (
      options.blockSize !== undefined &&
      !(Number.isInteger(options.blockSize) && options.blockSize > 0)
    ) {
      throw new RouterError(
        'INVALID_OPTIONS',
        `blockSize must be a positive integer, got ${options.blockSize}`,
      );
    }
    this.#options = options;
    this.#log = options.log ?? ((line) => process.stderr.write(`[kvasir router] ${line}\n`));
    this.#replicas = options.replicas.map((spec, i) => new Replica(spec, i));
    this.#policy =
      typeof options.policy === 'object'
        ? options.policy
        : builtinRoutingPolicy(options.policy ?? 'kv-aware', {
            ...(options.overlapWeight === undefined
              ? {}
              : { overlapWeight: options.overlapWeight }),
          });
    this.#blockSize = options.blockSize ?? 16;
    this.index = new PrefixIndex({
      ...(options.tierWeights ? { tierWeights: options.tierWeights } : {}),
      ...(options.sharedMedia ? { sharedMedia: options.sharedMedia } : {}),
    });
    this.#server = createServer((req, res) => void this.#handle(req, res));
    this.#server.keepAliveTimeout = 30_000;
  }

  /** The routing policy in use. */
  get policy(): RoutingPolicy {
    return this.#policy;
  }

  /** Tokens per block used to hash prompts. */
  get blockSize(): number {
    return this.#blockSize;
  }

  /**
   * Subscribes to every replica's events, runs a first health check, then listens.
   * @returns the URL the router listens on.
   * @throws Error when the port cannot be bound (Node's `EADDRINUSE`, ...).
   */
  async listen(): Promise<string> {
    for (const replica of this.#replicas) {
      const { events, replay } = replica.spec;
      if (events === undefined) continue;
      const sub = new KvEventSubscriber({
        endpoint: events,
        ...(replay === undefined ? {} : { replayEndpoint: replay }),
        onBatch: (batch) => this.#applyBatch(replica, batch),
        log: this.#log,
      });
      this.#subscribers.set(replica, sub);
      sub.start();
    }
    await this.#checkHealth();
    const interval = this.#options.healthIntervalMs ?? 1000;
    this.#timer = setInterval(() => void this.#checkHealth(), interval);
    this.#timer.unref();
    await new Promise<void>((resolve, reject) => {
      this.#server.once('error', reject);
      this.#server.listen(this.#options.port ?? 8080, this.#options.host ?? '127.0.0.1', () => {
        this.#server.off('error', reject);
        resolve();
      });
    });
    const address = this.#server.address() as AddressInfo;
    const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
    return `http://${host}:${address.port}`;
  }

  #applyBatch(replica: Replica, batch: KvEventBatch): void {
    for (const e of batch.events) {
      if (
        e.type === 'BlockStored' &&
        e.blockSize !== undefined &&
        this.#options.blockSize === undefined
      ) {
        this.#blockSize = e.blockSize;
      }
      this.index.apply(replica.url, e);
    }
  }

  async #checkHealth(): Promise<void> {
    const timeout = this.#options.healthTimeoutMs ?? 5000;
    const after = this.#options.unhealthyAfter ?? 3;
    await Promise.all(
      this.#replicas.map(async (r) => {
        if (r.probing) return;
        r.probing = true;
        const result = await r.probe(timeout);
        r.probing = false;
        if (this.#closed) return;
        r.consecutiveFailures = result === 'ok' ? 0 : r.consecutiveFailures + 1;
        // Until its first answer, a replica is out; then only a dead one, or one failing in a row.
        const ok =
          result === 'ok' ||
          (r.checked && result === 'failed' && r.consecutiveFailures < after && r.healthy);
        if (ok && !r.healthy && r.checked) {
          this.#log(`replica ${r.url} is back`);
          // It may have restarted with an empty cache: take its state again.
          this.#subscribers.get(r)?.resync();
        } else if (!ok && r.healthy) {
          this.#log(
            `replica ${r.url} failed its health check (${result === 'down' ? 'not listening' : `${r.consecutiveFailures} in a row`}); not routing to it`,
          );
        }
        r.healthy = ok;
        r.down = result === 'down';
        r.checked = true;
      }),
    );
  }

  /** Each replica's state. */
  replicas(): ReplicaState[] {
    return this.#replicas.map((r) => {
      const s = this.#subscribers.get(r)?.stats;
      return {
        url: r.url,
        healthy: r.healthy,
        inFlight: r.inFlight,
        pendingPrefillBlocks: r.pendingPrefillBlocks,
        activeBlocks: r.activeBlocks,
        routed: r.routed,
        failures: r.failures,
        indexedBlocks: this.index.size(r.url),
        events: s
          ? {
              batches: s.batches,
              snapshots: s.snapshots,
              replayed: s.replayed,
              sequence: s.sequence.toString(),
            }
          : null,
      };
    });
  }

  async #handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    res.on('error', () => {
      // A client that went away surfaces through 'close'.
    });
    try {
      const path = (req.url ?? '/').split('?')[0]!;
      if (req.method === 'GET' && path === '/health') {
        const up = this.#replicas.filter((r) => r.healthy).length;
        res.writeHead(up > 0 ? 200 : 503, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ status: up > 0 ? 'ok' : 'no healthy replica', replicas: up }));
        return;
      }
      if (req.method === 'GET' && path === '/metrics') {
        res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4; charset=utf-8' });
        res.end(renderRouterMetrics(this.replicas(), this.counters));
        return;
      }
      if (req.method === 'GET' && path === '/router/replicas') {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(
          JSON.stringify({
            policy: this.#policy.name,
            blockSize: this.#blockSize,
            replicas: this.replicas(),
          }),
        );
        return;
      }
      if (req.method === 'GET' && path === '/router/index') {
        // The index as events built it, per replica: for checks against the replicas' own state.
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(
          JSON.stringify({
            replicas: this.#replicas.map((r) => ({
              url: r.url,
              blocks: [...this.index.blocks(r.url)].sort(),
            })),
          }),
        );
        return;
      }
      const body = await this.#readBody(req);
      if (body === undefined) {
        res.writeHead(413, { 'content-type': 'application/json' });
        res.end(
          errorBody(
            `request body over ${this.#maxBody()} bytes`,
            'request_too_large',
            'invalid_request_error',
          ),
        );
        return;
      }
      const kind =
        req.method === 'POST' && path === '/v1/completions'
          ? 'completion'
          : req.method === 'POST' && path === '/v1/chat/completions'
            ? 'chat'
            : undefined;
      await this.#route(req, res, body, kind);
    } catch (error) {
      this.#log(`request failed: ${(error as Error).message}`);
      if (!res.headersSent) {
        res.writeHead(500, { 'content-type': 'application/json' });
        res.end(errorBody('internal router error', 'internal_error'));
      } else res.destroy();
    }
  }

  #maxBody(): number {
    return this.#options.maxBodyBytes ?? 16 * 2 ** 20;
  }

  #readBody(req: IncomingMessage): Promise<Buffer | undefined> {
    return new Promise((resolve, reject) => {
      const chunks: Buffer[] = [];
      let size = 0;
      let over = false;
      req.on('data', (c: Buffer) => {
        size += c.length;
        if (size > this.#maxBody()) over = true;
        else chunks.push(c);
      });
      req.on('end', () => resolve(over ? undefined : Buffer.concat(chunks)));
      req.on('error', reject);
    });
  }

  async #route(
    req: IncomingMessage,
    res: ServerResponse,
    body: Buffer,
    kind: 'completion' | 'chat' | undefined,
  ): Promise<void> {
    let hashes: BlockHash[] = [];
    let request: RoutingRequest = {
      kind: kind ?? 'completion',
      model: '',
      promptBlocks: 0,
      promptTokens: 0,
      maxTokens: 16,
    };
    if (kind !== undefined) {
      this.counters.requests++;
      try {
        const parsed: unknown = JSON.parse(body.toString('utf8'));
        const prompt = await promptOf(kind, parsed, this.#options.tokenizer);
        const root = (this.#options.chainRoot ?? engineChainRoot)(prompt.model);
        hashes = promptBlockHashes(prompt.tokens, this.#blockSize, root);
        request = {
          kind,
          model: prompt.model,
          promptBlocks: hashes.length,
          promptTokens: prompt.tokens.length,
          maxTokens: maxTokensOf(parsed),
        };
      } catch {
        // Not JSON, or not a prompt the tokenizer takes: routed by load; the replica answers.
      }
    }
    const tried = new Set<Replica>();
    let last: Extract<Attempt, { kind: 'retry' }> | undefined;
    for (;;) {
      let candidates = this.#replicas.filter((r) => r.healthy && !tried.has(r));
      // None healthy: the busy ones (slow health checks, still listening) before a 503.
      if (candidates.length === 0) {
        candidates = this.#replicas.filter((r) => r.checked && !r.down && !tried.has(r));
      }
      if (candidates.length === 0 || res.destroyed) break;
      const views = candidates.map((r): ReplicaCandidate => {
        const m = this.index.match(r.url, hashes);
        return {
          url: r.url,
          index: r.index,
          inFlight: r.inFlight,
          pendingPrefillBlocks: r.pendingPrefillBlocks,
          activeBlocks: r.activeBlocks,
          cachedBlocks: m.blocks,
          cachedWeighted: m.weighted,
        };
      });
      const chosen =
        kind === undefined ? this.#fallback.choose(request, views) : this.#choose(request, views);
      const view = typeof chosen === 'string' ? views.find((v) => v.url === chosen)! : chosen;
      const replica = candidates.find((r) => r.url === view.url)!;
      tried.add(replica);
      if (tried.size > 1) this.counters.retries++;
      const attempt = await this.#attempt(req, res, body, replica, request, view, hashes);
      if (attempt.kind === 'done') return;
      last = attempt;
    }
    if (res.destroyed) return;
    if (last?.status !== undefined) {
      // Every replica refused it (full queues, draining): the last answer, as it was.
      res.writeHead(last.status, {
        ...forwardHeaders(last.headers ?? {}),
        'content-length': String(last.body?.length ?? 0),
      });
      res.end(last.body);
      return;
    }
    this.counters.noReplica++;
    res.writeHead(503, { 'content-type': 'application/json', 'retry-after': '1' });
    res.end(
      errorBody(
        last ? `no replica could take the request (last: ${last.reason})` : 'no healthy replica',
        'no_replica',
      ),
    );
  }

  #choose(request: RoutingRequest, views: ReplicaCandidate[]): ReplicaCandidate | string {
    try {
      const chosen = this.#policy.choose(request, views);
      const ok =
        typeof chosen === 'string' ? views.some((v) => v.url === chosen) : views.includes(chosen);
      if (ok) return chosen;
      throw new RouterError(
        'POLICY_FAILED',
        `chose ${JSON.stringify(typeof chosen === 'string' ? chosen : (chosen as ReplicaCandidate)?.url)}, not a candidate`,
      );
    } catch (error) {
      if (this.counters.policyFailures++ === 0) {
        this.#log(
          `routing policy ${this.#policy.name} failed (${(error as Error).message}); least-loaded instead`,
        );
      }
      return this.#fallback.choose(request, views);
    }
  }

  #attempt(
    req: IncomingMessage,
    res: ServerResponse,
    body: Buffer,
    replica: Replica,
    request: RoutingRequest,
    view: ReplicaCandidate,
    hashes: readonly BlockHash[],
  ): Promise<Attempt> {
    const uncached = Math.max(0, request.promptBlocks - view.cachedBlocks);
    // What the request adds to the replica's cache: a cached prefix is already held there.
    const added = uncached + Math.ceil(request.maxTokens / this.#blockSize);
    replica.inFlight++;
    replica.pendingPrefillBlocks += uncached;
    replica.activeBlocks += added;
    let prefilling = true;
    const prefilled = () => {
      if (!prefilling) return;
      prefilling = false;
      replica.pendingPrefillBlocks -= uncached;
    };
    let released = false;
    const release = () => {
      if (released) return;
      released = true;
      prefilled();
      replica.inFlight--;
      replica.activeBlocks -= added;
    };
    if (hashes.length > 0)
      this.index.predict(replica.url, hashes, this.#options.predictionTtlMs ?? 10_000);
    return new Promise<Attempt>((resolve) => {
      let settled = false;
      const settle = (a: Attempt) => {
        if (settled) return;
        settled = true;
        release();
        if (a.kind === 'done') {
          replica.routed++;
          if (request.promptBlocks > 0) {
            this.counters.promptBlocks += request.promptBlocks;
            this.counters.cachedBlocks += view.cachedBlocks;
          }
        }
        resolve(a);
      };
      const headers = forwardHeaders(req.headers);
      headers['content-length'] = String(body.length);
      const upstream = httpRequest(`${replica.url}${req.url ?? '/'}`, {
        method: req.method,
        headers,
        agent: replica.agent,
      });
      // The client left: stop the replica's work too (it aborts on disconnect).
      const onClientClose = () => {
        if (!res.writableFinished) upstream.destroy();
      };
      res.on('close', onClientClose);
      let started = false;
      let failed = false;
      let contentType = '';
      const fail = (error: Error) => {
        if (failed || settled) return;
        failed = true;
        res.off('close', onClientClose);
        if (!started) {
          replica.failures++;
          // Nothing listens there: out at once. A reset connection is retried elsewhere, but
          // the replica stays in (a keep-alive race or one failed request is not a dead one;
          // its health check decides).
          const refused = (error as NodeJS.ErrnoException).code === 'ECONNREFUSED';
          if (refused) replica.down = true;
          if (refused && replica.healthy && !res.destroyed) {
            replica.healthy = false;
            this.#log(
              `replica ${replica.url} refused a connection; not routing to it until its health check passes`,
            );
          }
          settle({ kind: 'retry', reason: `${replica.url}: ${error.message}` });
          return;
        }
        this.#breakStream(res, replica, contentType, error.message);
        settle({ kind: 'done' });
      };
      upstream.on('error', fail);
      upstream.on('response', (up) => {
        const status = up.statusCode ?? 502;
        if (RETRY_STATUSES.has(status)) {
          const chunks: Buffer[] = [];
          up.on('data', (c: Buffer) => chunks.push(c));
          up.on('end', () => {
            res.off('close', onClientClose);
            settle({
              kind: 'retry',
              status,
              headers: up.headers,
              body: Buffer.concat(chunks),
              reason: `${replica.url} answered ${status}`,
            });
          });
          return;
        }
        // Headers wait for the first byte of the body: until then the request can still move.
        const start = () => {
          if (started) return;
          started = true;
          prefilled();
          contentType = String(up.headers['content-type'] ?? '');
          res.writeHead(status, { ...forwardHeaders(up.headers), 'x-kvasir-replica': replica.url });
          res.flushHeaders();
        };
        up.on('data', (chunk: Buffer) => {
          start();
          if (!res.write(chunk)) {
            up.pause();
            res.once('drain', () => up.resume());
          }
        });
        up.on('end', () => {
          if (!up.complete) {
            fail(new Error('the replica closed the response'));
            return;
          }
          res.off('close', onClientClose);
          start();
          res.end();
          settle({ kind: 'done' });
        });
        up.on('aborted', () => fail(new Error('the replica closed the response')));
        up.on('error', fail);
      });
      upstream.end(body);
    });
  }

  /** Ends a response the replica broke after its first byte: an SSE error event, else a reset. */
  #breakStream(res: ServerResponse, replica: Replica, contentType: string, reason: string): void {
    this.counters.brokenStreams++;
    replica.failures++;
    if (res.destroyed || res.writableEnded) return;
    if (contentType.startsWith('text/event-stream')) {
      const message = `replica ${replica.url} failed during the stream (${reason})`;
      res.end(`data: ${errorBody(message, 'replica_failed')}\n\ndata: [DONE]\n\n`);
    } else {
      // A JSON body cut in the middle cannot be completed honestly.
      res.destroy();
    }
  }

  /** Stops listening, unsubscribes, and closes the connection pools. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    clearInterval(this.#timer);
    for (const sub of this.#subscribers.values()) sub.close();
    await new Promise<void>((resolve) => {
      this.#server.close(() => resolve());
      this.#server.closeAllConnections();
    });
    for (const r of this.#replicas) r.close();
  }
}
