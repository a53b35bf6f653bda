import Fastify, { type FastifyInstance, type FastifyReply } from 'fastify';
import { EngineError, errorAnswer } from './errors.js';
import { bearerAuth } from './http/auth.js';
import { answerClientError } from './http/client-errors.js';
import { capConnections, defaultMaxConnections } from './http/connections.js';
import { parseJsonBody } from './http/json-body.js';
import { InFlightRequests } from './in-flight.js';
import { type InferenceEngine, validateInferenceEngine } from './inference-engine.js';
import { ServerMetrics } from './metrics.js';
import type { RouteContext } from './routes/context.js';
import { registerGenerationRoutes } from './routes/generation.js';
import { registerModelRoutes } from './routes/models.js';
import { registerStatusRoutes } from './routes/status.js';

/** Options of {@link createServer}. */
export interface ServerOptions {
  /** The engine that runs the model. */
  readonly engine: InferenceEngine;
  /** Interface to bind. Default `127.0.0.1` (loopback only). */
  readonly host?: string;
  /** Port to bind; 0 picks a free one. Default 8000. */
  readonly port?: number;
  /**
   * Bearer key required on `/v1/*`. Default: the `KVASIR_API_KEY` environment variable; no key
   * (open) when neither is set. `/health` and `/metrics` stay open.
   */
  readonly apiKey?: string;
  /** Largest request body in bytes (larger → 413). Default 4 MiB. */
  readonly bodyLimitBytes?: number;
  /**
   * Time a connection has to send a request's headers, from its opening or the previous
   * request (then 408 and closed): silent and half-sent requests cannot hold a socket. Default
   * 10 s.
   */
  readonly headersTimeoutMs?: number;
  /** How long an idle kept-alive connection stays open. Default 30 s. */
  readonly idleTimeoutMs?: number;
  /**
   * Most connections kept open: past it a new connection replaces the oldest idle one, or gets
   * 503 when all are busy. Default 4,096, less where the open-file limit (`ulimit -n`) is lower.
   */
  readonly maxConnections?: number;
  /** Connections the kernel queues before they are accepted (capped by `somaxconn`). Default 4,096. */
  readonly backlog?: number;
  /** Deadline for one generation, in ms (then it is aborted; → 504). Default 10 minutes. */
  readonly requestTimeoutMs?: number;
  /** Largest `n` accepted. Default 16. */
  readonly maxN?: number;
  /**
   * Largest non-streamed answer, in bytes, estimated from the request before anything is
   * generated (prompts, `n`, `max_tokens`, `echo`, `logprobs`); a larger one is refused with 400
   * naming the field to change. Default 16 MiB.
   */
  readonly maxResponseBytes?: number;
  /** Default for {@link KvasirServer.close}'s deadline, in ms. Default 30 s. */
  readonly shutdownDeadlineMs?: number;
  /** Fastify logger setting. Default off. */
  readonly logger?: boolean;
}

/** A running (or ready to run) OpenAI-compatible server. */
export interface KvasirServer {
  /** The underlying Fastify instance (for `inject` in tests or extra routes). */
  readonly app: FastifyInstance;
  /** The metrics registry behind `/metrics`. */
  readonly metrics: ServerMetrics;
  /** Starts listening; resolves to the base URL (`http://127.0.0.1:8000`). */
  listen(): Promise<string>;
  /** Requests currently being generated. */
  readonly inFlight: number;
  /** True once {@link close} has begun: new generation requests get 503. */
  readonly draining: boolean;
  /**
   * Graceful shutdown: refuses new requests (503), lets in-flight generations finish until the
   * deadline, aborts the rest (freeing their KV blocks), then closes every connection.
   */
  close(deadlineMs?: number): Promise<void>;
}

/**
 * Builds an OpenAI-compatible HTTP server over an {@link InferenceEngine}: `POST
 * /v1/completions`, `POST /v1/chat/completions` (streaming or not), `GET /v1/models`, `GET
 * /health`, `GET /metrics`.
 *
 * @example
 * ```ts
 * const server = createServer({ engine, port: 8000 });
 * console.log(await server.listen()); // http://127.0.0.1:8000
 * process.on('SIGTERM', () => server.close(30_000));
 * ```
 * @throws {EngineError} INVALID_ENGINE when `engine` does not implement the `v1` contract.
 */
export function createServer(options: ServerOptions): KvasirServer {
  const engine = validateInferenceEngine(options.engine);
  const host = options.host ?? '127.0.0.1';
  const port = options.port ?? 8000;
  const apiKey = options.apiKey ?? process.env.KVASIR_API_KEY ?? undefined;
  const shutdownDeadlineMs = options.shutdownDeadlineMs ?? 30_000;
  const inflight = new InFlightRequests(options.requestTimeoutMs ?? 600_000);
  const metrics = new ServerMetrics(() => engine.stats());

  const headersTimeout = options.headersTimeoutMs ?? 10_000;
  const app = Fastify({
    logger: options.logger ?? false,
    bodyLimit: options.bodyLimitBytes ?? 4 * 1024 * 1024,
    http: { headersTimeout, connectionsCheckingInterval: Math.min(1000, headersTimeout / 2) },
    keepAliveTimeout: options.idleTimeoutMs ?? 30_000,
    // Receiving the body must not take forever; generation time is bounded separately.
    requestTimeout: Math.max(60_000, headersTimeout),
    // Draining is answered by the routes themselves (503 in OpenAI's error shape).
    return503OnClosing: false,
    clientErrorHandler: (error, socket) => {
      if (answerClientError(error, socket) !== undefined) metrics.observeError('malformed_request');
    },
  });

  const sendError = (reply: FastifyReply, error: unknown) => {
    const answer = errorAnswer(error);
    metrics.observeError(answer.body.error.code);
    if (answer.status >= 500 && answer.body.error.code === 'internal_error') {
      app.log.error(error);
    }
    return reply.code(answer.status).headers(answer.headers).send(answer.body);
  };
  app.setErrorHandler((error, _request, reply) => sendError(reply, error));
  app.setNotFoundHandler((request, reply) =>
    sendError(
      reply,
      new EngineError('NOT_FOUND', `no route for ${request.method} ${request.url.split('?')[0]}`),
    ),
  );
  capConnections(app.server, options.maxConnections ?? defaultMaxConnections(), () =>
    metrics.observeError('too_many_connections'),
  );
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (_request, body, done) => {
    try {
      done(null, parseJsonBody(body as string));
    } catch (error) {
      done(error as Error, undefined);
    }
  });
  if (apiKey) app.addHook('onRequest', bearerAuth(apiKey));

  const context: RouteContext = {
    engine,
    metrics,
    inflight,
    maxN: options.maxN ?? 16,
    ...(options.maxResponseBytes === undefined
      ? {}
      : { maxResponseBytes: options.maxResponseBytes }),
  };
  registerStatusRoutes(app, context);
  registerModelRoutes(app, context);
  registerGenerationRoutes(app, context);

  let closing: Promise<void> | undefined;
  return {
    app,
    metrics,
    get inFlight() {
      return inflight.size;
    },
    get draining() {
      return inflight.draining;
    },
    async listen() {
      await app.listen({ host, port, backlog: options.backlog ?? 4096 });
      const address = app.server.address();
      const bound = typeof address === 'object' && address ? address.port : port;
      const shownHost = host.includes(':') ? `[${host}]` : host;
      return `http://${shownHost}:${bound}`;
    },
    close(deadlineMs = shutdownDeadlineMs) {
      closing ??= inflight.drain(deadlineMs).then(() => app.close());
      return closing;
    },
  };
}
