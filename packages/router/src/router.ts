import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { BlockHash } from '@kvasir/kv-allocator';
import { engineChainRoot, promptBlockHashes } from './block-hashes.js';
import { RouterError } from './errors.js';
import { HealthChecker } from './health-checker.js';
import type { KvEventBatch } from './kv-event-decoder.js';
import { KvEventSubscriber } from './kv-event-subscriber.js';
import { builtinRoutingPolicy, leastLoadedPolicy } from './policies.js';
import { PrefixIndex } from './prefix-index.js';
import { promptOf } from './prompt.js';
import { Replica } from './replica.js';
import { type Attempt, forwardToReplica } from './replica-attempt.js';
import { routeExplanation } from './route-explanation.js';
import { answerRouterEndpoint } from './router-endpoints.js';
import { errorBody, forwardHeaders, maxTokensOf, readBody } from './router-http.js';
import {
  checkRouterOptions,
  type KvRouterOptions,
  type ReplicaState,
  type RouterCounters,
} from './router-options.js';
import type { ReplicaCandidate, RoutingPolicy, RoutingRequest } from './routing-policy.js';

export type { KvRouterOptions, ReplicaState, RouterCounters } from './router-options.js';

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
  readonly #health: HealthChecker;
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

  /** @throws RouterError `INVALID_OPTIONS` for no replica, a duplicate, or a bad option or threshold. */
  constructor(options: KvRouterOptions) {
    checkRouterOptions(options);
    this.#options = options;
    this.#log = options.log ?? ((line) => process.stderr.write(`[kvasir router] ${line}\n`));
    this.#replicas = options.replicas.map((spec, i) => new Replica(spec, i));
    this.#policy =
      typeof options.policy === 'object'
        ? options.policy
        : builtinRoutingPolicy(options.policy ?? 'cache-aware', {
            ...(options.overlapWeight === undefined
              ? {}
              : { overlapWeight: options.overlapWeight }),
            ...options.cacheAware,
          });
    this.#blockSize = options.blockSize ?? 16;
    this.index = new PrefixIndex({
      ...(options.tierWeights ? { tierWeights: options.tierWeights } : {}),
      ...(options.sharedMedia ? { sharedMedia: options.sharedMedia } : {}),
    });
    this.#health = new HealthChecker(this.#replicas, {
      timeoutMs: options.healthTimeoutMs ?? 5000,
      unhealthyAfter: options.unhealthyAfter ?? 3,
      // It may have restarted with an empty cache: take its state again.
      onBack: (r) => this.#subscribers.get(r)?.resync(),
      log: this.#log,
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
    await this.#health.start(this.#options.healthIntervalMs ?? 1000);
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
      if (answerRouterEndpoint(req.method, path, res, this)) return;
      const body = await readBody(req, this.#maxBody());
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
          indexedBlocks: this.index.size(r.url),
        };
      });
      const predicted = this.#options.explainRoutes
        ? candidates.map((r) => this.index.match(r.url, hashes).predicted)
        : [];
      const chosen =
        kind === undefined ? this.#fallback.choose(request, views) : this.#choose(request, views);
      const view = typeof chosen === 'string' ? views.find((v) => v.url === chosen)! : chosen;
      const replica = candidates.find((r) => r.url === view.url)!;
      tried.add(replica);
      if (tried.size > 1) this.counters.retries++;
      const explain =
        this.#options.explainRoutes && kind !== undefined
          ? routeExplanation(this.#policy, request, views, predicted, view)
          : undefined;
      const attempt = await this.#attempt(req, res, body, replica, request, view, hashes, explain);
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

  /**
   * One attempt on `replica`: its load counted while the request runs (prefill until the first
   * byte), its prompt's blocks predicted there, then the request forwarded.
   */
  async #attempt(
    req: IncomingMessage,
    res: ServerResponse,
    body: Buffer,
    replica: Replica,
    request: RoutingRequest,
    view: ReplicaCandidate,
    hashes: readonly BlockHash[],
    explain: string | undefined,
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
    if (hashes.length > 0)
      this.index.predict(replica.url, hashes, this.#options.predictionTtlMs ?? 10_000);
    const attempt = await forwardToReplica({
      req,
      res,
      body,
      replica,
      ...(explain === undefined ? {} : { explain }),
      onStarted: prefilled,
      onBroken: () => this.counters.brokenStreams++,
      log: this.#log,
    });
    prefilled();
    replica.inFlight--;
    replica.activeBlocks -= added;
    if (attempt.kind === 'done') {
      replica.routed++;
      if (request.promptBlocks > 0) {
        this.counters.promptBlocks += request.promptBlocks;
        this.counters.cachedBlocks += view.cachedBlocks;
      }
    }
    return attempt;
  }

  /** Stops listening, unsubscribes, and closes the connection pools. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#health.stop();
    for (const sub of this.#subscribers.values()) sub.close();
    await new Promise<void>((resolve) => {
      this.#server.close(() => resolve());
      this.#server.closeAllConnections();
    });
    for (const r of this.#replicas) r.close();
  }
}
