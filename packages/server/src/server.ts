import { createHash, randomUUID, timingSafeEqual } from 'node:crypto';
import { type ServerResponse, STATUS_CODES } from 'node:http';
import type { Socket } from 'node:net';
import { performance } from 'node:perf_hooks';
import Fastify, { type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import { type ChoiceEmission, ChoiceOutput, type PlacedLogprob } from './choice-output.js';
import type {
  ChatMessage,
  FinishReason,
  GenerationRequest,
  GenerationStream,
  InferenceEngine,
  ModelCard,
  PromptEvent,
  TopLogprob,
} from './engine.js';
import { EngineError, errorAnswer } from './errors.js';
import { ServerMetrics } from './metrics.js';
import {
  type ChatBody,
  type CompletionBody,
  chatBodySchema,
  completionBodySchema,
  parseBody,
} from './schemas.js';

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
  /** Deadline for one generation, in ms (then it is aborted; → 504). Default 10 minutes. */
  readonly requestTimeoutMs?: number;
  /** Largest `n` accepted. Default 16. */
  readonly maxN?: number;
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

type Kind = 'completion' | 'chat';

interface Prepared {
  readonly kind: Kind;
  /** The first (usually only) prompt's request. */
  readonly request: GenerationRequest;
  /** One request per prompt of a batch, in order (`request` is the first). */
  readonly requests: readonly GenerationRequest[];
  /** Completions `echo`: each choice's text and log-probabilities start with its prompt's. */
  readonly echo: boolean;
  /** The prompt text each request echoes when the client sent text (token ids: the engine's). */
  readonly promptTexts: readonly (string | undefined)[];
  readonly stops: readonly string[];
  readonly stream: boolean;
  readonly includeUsage: boolean;
  readonly created: number;
}

interface InFlight {
  readonly controller: AbortController;
  readonly done: Promise<void>;
}

const SSE_HEADERS = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-cache',
  connection: 'keep-alive',
  'x-accel-buffering': 'no',
};

function digest(text: string): Buffer {
  return createHash('sha256').update(text).digest();
}

/** The only routes served without the API key; every other route, unknown ones too, needs it. */
const PUBLIC_ROUTES: ReadonlySet<string> = new Set(['/health', '/metrics']);

/** What Node's HTTP parser rejects, in words a client can act on. */
const PARSER_ERRORS: Readonly<Record<string, string>> = {
  HPE_INVALID_HEADER_TOKEN: 'a header name or value holds a character HTTP does not allow',
  HPE_LF_EXPECTED: 'a line ends in a bare CR or LF instead of CRLF',
  HPE_CR_EXPECTED: 'a line ends in a bare LF instead of CRLF',
  HPE_UNEXPECTED_CONTENT_LENGTH: 'Content-Length is given twice or together with Transfer-Encoding',
  HPE_INVALID_CONTENT_LENGTH: 'Content-Length is not a number',
  HPE_INVALID_TRANSFER_ENCODING: 'Transfer-Encoding is malformed',
  HPE_INVALID_CHUNK_SIZE: 'a chunk size of the chunked body is malformed',
  HPE_INVALID_METHOD: 'the request line has an unknown method',
  HPE_INVALID_URL: 'the request line has a malformed target',
  HPE_INVALID_VERSION: 'the request line has a malformed HTTP version',
  HPE_INVALID_CONSTANT: 'the request line is malformed',
  HPE_HEADER_OVERFLOW: 'the request headers are too large',
};

/**
 * Answers a request Node's HTTP parser refused (it never reaches a route) in OpenAI's error
 * shape, then closes the connection: after a framing error nothing later on it can be trusted.
 */
function answerClientError(error: Error & { code?: string }, socket: Socket): number | undefined {
  if (error.code === 'ECONNRESET' || !socket.writable) {
    socket.destroy();
    return undefined;
  }
  const status =
    error.code === 'HPE_HEADER_OVERFLOW'
      ? 431
      : error.code === 'ERR_HTTP_REQUEST_TIMEOUT'
        ? 408
        : 400;
  const reason =
    (error.code && PARSER_ERRORS[error.code]) ??
    (status === 408 ? 'the request was not received in time' : 'the request is not valid HTTP/1.1');
  const body = JSON.stringify({
    error: {
      message: `malformed HTTP request: ${reason}`,
      type: 'invalid_request_error',
      param: null,
      code: status === 408 ? 'request_timeout' : 'malformed_request',
    },
  });
  socket.end(
    `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\ncontent-type: application/json; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
  );
  return status;
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
 */
export function createServer(options: ServerOptions): KvasirServer {
  const { engine } = options;
  const host = options.host ?? '127.0.0.1';
  const port = options.port ?? 8000;
  const apiKey = options.apiKey ?? process.env.KVASIR_API_KEY ?? undefined;
  const keyDigest = apiKey ? digest(apiKey) : undefined;
  const requestTimeoutMs = options.requestTimeoutMs ?? 600_000;
  const maxN = options.maxN ?? 16;
  const shutdownDeadlineMs = options.shutdownDeadlineMs ?? 30_000;
  const inflight = new Set<InFlight>();
  let draining = false;

  const app = Fastify({
    logger: options.logger ?? false,
    bodyLimit: options.bodyLimitBytes ?? 4 * 1024 * 1024,
    // Receiving the body must not take forever; generation time is bounded separately.
    requestTimeout: 60_000,
    // Draining is answered by the routes themselves (503 in OpenAI's error shape).
    return503OnClosing: false,
    clientErrorHandler: (error, socket) => {
      if (answerClientError(error, socket) !== undefined) metrics.observeError('malformed_request');
    },
  });
  const metrics = new ServerMetrics(() => engine.stats());

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

  // Decided on the route that will run (the router's decoded, matched path), never on the raw
  // URL: `/%761/models` and absolute-form targets reach the same routes as `/v1/models`.
  app.addHook('onRequest', async (request) => {
    if (!keyDigest) return;
    const route = request.routeOptions.url;
    if (route !== undefined && PUBLIC_ROUTES.has(route)) return;
    const header = request.headers.authorization;
    const token = typeof header === 'string' && header.startsWith('Bearer ') ? header.slice(7) : '';
    if (!timingSafeEqual(digest(token), keyDigest)) {
      throw new EngineError('UNAUTHORIZED', 'missing or invalid API key (Authorization: Bearer)');
    }
  });

  const findModel = (id: string | undefined): ModelCard => {
    const models = engine.listModels();
    const model = id === undefined ? models[0] : models.find((m) => m.id === id);
    if (!model) {
      throw new EngineError('MODEL_NOT_FOUND', `model '${id ?? ''}' does not exist`, {
        details: { param: 'model' },
      });
    }
    return model;
  };

  const checkAccepting = () => {
    if (draining) throw new EngineError('DRAINING', 'server is shutting down');
    const health = engine.health();
    if (health.status !== 'ok') {
      throw new EngineError(
        'DRAINING',
        `engine is ${health.status}${health.detail ? `: ${health.detail}` : ''}`,
      );
    }
  };

  app.get('/health', async (_request, reply) => {
    const health = engine.health();
    const status = draining ? 'draining' : health.status;
    return reply.code(status === 'ok' ? 200 : 503).send({ status, detail: health.detail ?? null });
  });

  app.get('/metrics', async (_request, reply) => {
    const text = await metrics.render();
    return reply.type(metrics.registry.contentType).send(text);
  });

  const modelJson = (m: ModelCard) => ({
    id: m.id,
    object: 'model',
    created: m.created,
    owned_by: m.ownedBy,
    max_model_len: m.maxModelLen,
  });

  app.get('/v1/models', async () => ({ object: 'list', data: engine.listModels().map(modelJson) }));
  app.get<{ Params: { id: string } }>('/v1/models/:id', async (request) =>
    modelJson(findModel(request.params.id)),
  );

  async function prepare(kind: Kind, raw: unknown): Promise<Prepared> {
    const body: CompletionBody | ChatBody =
      kind === 'completion' ? parseBody(completionBodySchema, raw) : parseBody(chatBodySchema, raw);
    const model = findModel(body.model);
    checkAccepting();

    const n = body.n ?? 1;
    if (n > maxN) {
      throw new EngineError('INVALID_REQUEST', `n: at most ${maxN} choices per request`, {
        details: { param: 'n' },
      });
    }
    let prompts: readonly (string | readonly number[])[];
    let logprobs: number | undefined;
    let maxTokens: number | null | undefined;
    let promptParam: string;
    let echo = false;
    const stream = body.stream ?? false;
    if (kind === 'completion') {
      const b = body as CompletionBody;
      if (b.best_of != null && b.best_of !== n) {
        throw new EngineError('INVALID_REQUEST', 'best_of: only best_of equal to n is supported', {
          details: { param: 'best_of' },
        });
      }
      prompts =
        typeof b.prompt === 'string' || typeof b.prompt[0] === 'number'
          ? [b.prompt as string | readonly number[]]
          : (b.prompt as readonly (string | readonly number[])[]);
      echo = b.echo ?? false;
      logprobs = b.logprobs ?? undefined;
      maxTokens = b.max_tokens ?? 16;
      promptParam = 'prompt';
      if (maxTokens === 0 && !echo) {
        throw new EngineError(
          'INVALID_REQUEST',
          'max_tokens: 0 is allowed only with echo (to score the prompt)',
          { details: { param: 'max_tokens' } },
        );
      }
      // The echoed prompt and its log-probabilities are sent whole, before any token.
      if (stream && echo) {
        throw new EngineError('INVALID_REQUEST', 'echo: not supported with stream', {
          details: { param: 'echo' },
        });
      }
      if (stream && prompts.length > 1) {
        throw new EngineError(
          'INVALID_REQUEST',
          'prompt: a batch of prompts is not supported with stream; send one request per prompt',
          { details: { param: 'prompt' } },
        );
      }
    } else {
      const b = body as ChatBody;
      const messages: ChatMessage[] = b.messages.map((m) => ({
        role: m.role,
        content:
          typeof m.content === 'string'
            ? m.content
            : (m.content ?? []).map((part) => part.text).join(''),
        ...(m.name === undefined ? {} : { name: m.name }),
      }));
      prompts = [await engine.applyChatTemplate(model.id, messages)];
      if (b.top_logprobs != null && !b.logprobs) {
        throw new EngineError('INVALID_REQUEST', 'top_logprobs: requires logprobs to be true', {
          details: { param: 'top_logprobs' },
        });
      }
      logprobs = b.logprobs ? (b.top_logprobs ?? 0) : undefined;
      maxTokens = b.max_completion_tokens ?? b.max_tokens;
      promptParam = 'messages';
    }
    const stop = body.stop == null ? [] : typeof body.stop === 'string' ? [body.stop] : body.stop;
    const id = `${kind === 'chat' ? 'chatcmpl' : 'cmpl'}-${randomUUID().replaceAll('-', '')}`;
    const requests: GenerationRequest[] = [];
    const kvCompression = body.kv_compression ?? undefined;
    // A compressed cache positions tokens by their place in it: the request may outrun the
    // context (the engine refuses policies that cannot, such as a whole prompt longer than it).
    const unbounded =
      kvCompression !== undefined
        ? kvCompression.positions !== 'original'
        : model.unboundedContext === true;
    for (const [i, prompt] of prompts.entries()) {
      const param = prompts.length > 1 ? `${promptParam}[${i}]` : promptParam;
      const promptTokens =
        typeof prompt === 'string' ? await engine.tokenize(model.id, prompt) : prompt;
      const left = checkPrompt(model, promptTokens, param, unbounded);
      const room = unbounded ? model.maxModelLen : left;
      if (!unbounded && maxTokens != null && maxTokens > room) {
        if (kind === 'chat' || body.max_tokens != null) {
          const field =
            kind === 'chat' && (body as ChatBody).max_completion_tokens != null
              ? 'max_completion_tokens'
              : 'max_tokens';
          throw new EngineError(
            'INVALID_REQUEST',
            `${field}: ${maxTokens} + ${promptTokens.length} prompt tokens${prompts.length > 1 ? ` of ${param}` : ''} exceed the model's context of ${model.maxModelLen}`,
            { details: { param: field } },
          );
        }
      }
      requests.push({
        // The engine keys requests by id: the prompts of a batch get their own.
        id: i === 0 ? id : `${id}-${i}`,
        model: model.id,
        promptTokens,
        n,
        maxTokens: unbounded ? (maxTokens ?? room) : Math.min(maxTokens ?? room, room),
        sampling: {
          temperature: body.temperature ?? 1,
          topP: body.top_p ?? 1,
          topK: body.top_k == null || body.top_k < 0 ? 0 : body.top_k,
          minP: body.min_p ?? 0,
          presencePenalty: body.presence_penalty ?? 0,
          frequencyPenalty: body.frequency_penalty ?? 0,
          repetitionPenalty: body.repetition_penalty ?? 1,
          ...(body.seed == null ? {} : { seed: body.seed }),
        },
        ...(logprobs === undefined ? {} : { logprobs }),
        stopTokenIds: body.stop_token_ids ?? [],
        ignoreEos: body.ignore_eos ?? false,
        ...(echo ? { echo: true } : {}),
        ...(kvCompression ? { kvCompression } : {}),
      });
    }
    return {
      kind,
      request: requests[0]!,
      requests,
      echo,
      promptTexts: prompts.map((p) => (typeof p === 'string' ? p : undefined)),
      stops: stop.filter((s) => s.length > 0),
      stream,
      includeUsage: body.stream_options?.include_usage ?? false,
      created: Math.floor(Date.now() / 1000),
    };
  }

  /**
   * Checks one prompt's token ids against the model; returns the room left for generation.
   * @throws EngineError `INVALID_REQUEST` for bad or out-of-vocabulary ids or an empty prompt,
   *   `PROMPT_TOO_LONG` for a prompt that fills the context (unless `unbounded`: a request whose
   *   KV cache is compressed may outrun the context).
   */
  function checkPrompt(
    model: ModelCard,
    promptTokens: readonly number[],
    param: string,
    unbounded = false,
  ): number {
    for (const id of promptTokens) {
      if (!Number.isInteger(id) || id < 0) {
        throw new EngineError(
          'INVALID_REQUEST',
          `${param}: token ids must be non-negative integers`,
          {
            details: { param },
          },
        );
      }
    }
    const vocabSize = model.vocabSize;
    if (vocabSize !== undefined) {
      const outside = promptTokens.findIndex((id) => id >= vocabSize);
      if (outside >= 0) {
        throw new EngineError(
          'INVALID_REQUEST',
          `${param}: token ${outside} has id ${promptTokens[outside]}, outside the vocabulary of ${vocabSize} tokens`,
          { details: { param } },
        );
      }
    }
    if (promptTokens.length === 0) {
      throw new EngineError('INVALID_REQUEST', `${param}: the prompt is empty`, {
        details: { param },
      });
    }
    const room = model.maxModelLen - promptTokens.length;
    if (room <= 0 && !unbounded) {
      throw new EngineError(
        'PROMPT_TOO_LONG',
        `${param}: the prompt has ${promptTokens.length} tokens; the model's context is ${model.maxModelLen}`,
        { details: { param } },
      );
    }
    return room;
  }

  /**
   * OpenAI's legacy `logprobs` object; with `echo`, the prompt's tokens come first (the first
   * one with `null` log-probability and alternatives) and the generated tokens' offsets move
   * past the echoed text.
   */
  function completionLogprobs(
    placed: readonly PlacedLogprob[],
    withTop: boolean,
    echoed?: { readonly prompt: PromptEvent; readonly textLength: number },
  ) {
    const tokens: string[] = [];
    const tokenLogprobs: (number | null)[] = [];
    const top: (Record<string, number> | null)[] = [];
    const offsets: number[] = [];
    const topObject = (list: readonly TopLogprob[] | null) =>
      list === null ? null : Object.fromEntries(list.map((t) => [t.token, t.logprob]));
    let shift = 0;
    if (echoed) {
      let offset = 0;
      for (const lp of echoed.prompt.logprobs ?? []) {
        tokens.push(lp.token);
        tokenLogprobs.push(lp.logprob);
        top.push(topObject(lp.top));
        offsets.push(offset);
        offset += lp.token.length;
      }
      shift = echoed.textLength;
    }
    for (const p of placed) {
      tokens.push(p.logprob.token);
      tokenLogprobs.push(p.logprob.logprob);
      top.push(topObject(p.logprob.top));
      offsets.push(p.textOffset + shift);
    }
    return {
      tokens,
      token_logprobs: tokenLogprobs,
      top_logprobs: withTop ? top : null,
      text_offset: offsets,
    };
  }

  function chatLogprobs(placed: readonly PlacedLogprob[]) {
    const bytes = (s: string) => Array.from(Buffer.from(s, 'utf8'));
    return {
      content: placed.map((p) => ({
        token: p.logprob.token,
        logprob: p.logprob.logprob,
        bytes: bytes(p.logprob.token),
        top_logprobs: p.logprob.top.map((t) => ({
          token: t.token,
          logprob: t.logprob,
          bytes: bytes(t.token),
        })),
      })),
      refusal: null,
    };
  }

  async function handle(kind: Kind, request: FastifyRequest, reply: FastifyReply) {
    const arrived = performance.now();
    const prepared = await prepare(kind, request.body);
    const controller = new AbortController();
    let settle!: () => void;
    const entry: InFlight = {
      controller,
      done: new Promise<void>((resolve) => {
        settle = resolve;
      }),
    };
    inflight.add(entry);
    const timer = setTimeout(
      () =>
        controller.abort(new EngineError('TIMEOUT', `generation exceeded ${requestTimeoutMs} ms`)),
      requestTimeoutMs,
    );
    timer.unref();
    // A client that goes away aborts its request, so its KV blocks come back at once.
    const onClose = () => {
      if (!reply.raw.writableFinished) {
        controller.abort(new Error('client disconnected'));
      }
    };
    reply.raw.on('close', onClose);
    try {
      const streams: GenerationStream[] = [];
      try {
        for (const gen of prepared.requests) {
          streams.push(await engine.generate(gen, controller.signal));
        }
      } catch (error) {
        // The prompts of a batch admitted before one was refused end with it.
        if (streams.length > 0) controller.abort(error);
        throw error;
      }
      if (prepared.stream) {
        reply.hijack();
        await streamResponse(prepared, streams[0]!, reply.raw, controller.signal, arrived);
        return reply;
      }
      return await collectResponse(prepared, streams, controller, arrived);
    } finally {
      clearTimeout(timer);
      reply.raw.off('close', onClose);
      inflight.delete(entry);
      settle();
    }
  }

  interface Tally {
    readonly outputs: ChoiceOutput[];
    /** The echoed prompt, when the request asked for `echo`. */
    prompt: PromptEvent | undefined;
    firstTokenAt: number | undefined;
    lastTokenAt: number | undefined;
    usage:
      | { promptTokens: number; cachedPromptTokens: number; completionTokens: number }
      | undefined;
  }

  /** Feeds the engine's events through the choices; calls `emit` for each visible change. */
  async function drive(
    prepared: Prepared,
    gen: GenerationRequest,
    stream: GenerationStream,
    signal: AbortSignal,
    arrived: number,
    emit: (index: number, e: ChoiceEmission) => Promise<void> | void,
  ): Promise<Tally> {
    const tally: Tally = {
      outputs: Array.from({ length: gen.n }, () => new ChoiceOutput(prepared.stops)),
      prompt: undefined,
      firstTokenAt: undefined,
      lastTokenAt: undefined,
      usage: undefined,
    };
    try {
      for await (const event of stream) {
        if (event.kind === 'usage') {
          tally.usage = event;
          continue;
        }
        if (event.kind === 'prompt') {
          tally.prompt = event;
          continue;
        }
        const out = tally.outputs[event.index];
        if (!out) continue;
        if (event.tokenIds.length > 0) {
          const now = (performance.now() - arrived) / 1000;
          tally.firstTokenAt ??= now;
          tally.lastTokenAt = now;
        }
        const emission = out.push(event);
        if (!emission) continue;
        if (emission.stoppedByString) stream.finishChoice(event.index);
        await emit(event.index, emission);
      }
    } catch (error) {
      if (!signal.aborted) throw error;
    }
    if (signal.aborted) {
      for (const out of tally.outputs) out.abort();
      const reason: unknown = signal.reason;
      if (EngineError.isInstance(reason)) throw reason;
    }
    // An engine that ends without finishing a choice has been cut short.
    for (const out of tally.outputs) out.abort();
    const completionTokens = tally.outputs.reduce((sum, o) => sum + o.tokenCount, 0);
    tally.usage ??= {
      promptTokens: gen.promptTokens.length,
      cachedPromptTokens: 0,
      completionTokens,
    };
    metrics.observeRequest({
      promptTokens: tally.usage.promptTokens,
      generatedTokens: tally.usage.completionTokens,
      firstTokenAt: tally.firstTokenAt,
      lastTokenAt: tally.lastTokenAt,
      tokensOfSlowestChoice: Math.max(...tally.outputs.map((o) => o.tokenCount)),
      finishReason: tally.outputs[0]?.finishReason ?? 'abort',
    });
    return tally;
  }

  const usageJson = (u: NonNullable<Tally['usage']>) => ({
    prompt_tokens: u.promptTokens,
    completion_tokens: u.completionTokens,
    total_tokens: u.promptTokens + u.completionTokens,
    prompt_tokens_details: { cached_tokens: u.cachedPromptTokens },
  });

  async function collectResponse(
    prepared: Prepared,
    streams: readonly GenerationStream[],
    controller: AbortController,
    arrived: number,
  ) {
    const n = prepared.request.n;
    const texts: string[][] = streams.map(() => Array.from({ length: n }, () => ''));
    const placed: PlacedLogprob[][][] = streams.map(() => Array.from({ length: n }, () => []));
    const settled = await Promise.allSettled(
      streams.map((stream, p) =>
        drive(prepared, prepared.requests[p]!, stream, controller.signal, arrived, (index, e) => {
          texts[p]![index] += e.text;
          placed[p]![index]!.push(...e.logprobs);
        }).catch((error: unknown) => {
          // One prompt of a batch failed: the others stop too, the response is the error.
          controller.abort(error);
          throw error;
        }),
      ),
    );
    const tallies: Tally[] = [];
    for (const result of settled) {
      if (result.status === 'rejected') throw result.reason;
      tallies.push(result.value);
    }
    const wantLogprobs = prepared.request.logprobs !== undefined;
    const withTop = (prepared.request.logprobs ?? 0) > 0;
    const base = {
      id: prepared.request.id,
      created: prepared.created,
      model: prepared.request.model,
    };
    if (prepared.kind === 'completion') {
      const choices = tallies.flatMap((tally, p) => {
        let echoed: { prompt: PromptEvent; textLength: number } | undefined;
        let echoText = '';
        if (prepared.echo) {
          const prompt = tally.prompt;
          if (!prompt || (wantLogprobs && !prompt.logprobs)) {
            throw new EngineError('INTERNAL', 'the engine did not echo the prompt');
          }
          // OpenAI echoes the prompt as sent; token ids come back as the engine decodes them.
          echoText = prepared.promptTexts[p] ?? prompt.text;
          echoed = { prompt, textLength: echoText.length };
        }
        return texts[p]!.map((text, i) => ({
          // OpenAI numbers the choices of a batch prompt after prompt: prompt p, choice i.
          index: p * n + i,
          text: echoText + text,
          logprobs: wantLogprobs ? completionLogprobs(placed[p]![i]!, withTop, echoed) : null,
          finish_reason: tally.outputs[i]?.finishReason ?? 'abort',
        }));
      });
      const usage = tallies.reduce(
        (sum, t) => ({
          promptTokens: sum.promptTokens + t.usage!.promptTokens,
          cachedPromptTokens: sum.cachedPromptTokens + t.usage!.cachedPromptTokens,
          completionTokens: sum.completionTokens + t.usage!.completionTokens,
        }),
        { promptTokens: 0, cachedPromptTokens: 0, completionTokens: 0 },
      );
      return { ...base, object: 'text_completion', choices, usage: usageJson(usage) };
    }
    const tally = tallies[0]!;
    const finish = (i: number): FinishReason => tally.outputs[i]?.finishReason ?? 'abort';
    return {
      ...base,
      object: 'chat.completion',
      choices: texts[0]!.map((text, i) => ({
        index: i,
        message: { role: 'assistant', content: text, refusal: null },
        logprobs: wantLogprobs ? chatLogprobs(placed[0]![i]!) : null,
        finish_reason: finish(i),
      })),
      usage: usageJson(tally.usage!),
    };
  }

  async function streamResponse(
    prepared: Prepared,
    stream: GenerationStream,
    raw: ServerResponse,
    signal: AbortSignal,
    arrived: number,
  ) {
    raw.on('error', () => {
      // A reset connection surfaces through 'close', which aborts the request.
    });
    raw.writeHead(200, SSE_HEADERS);
    // Send the headers now: a request still waiting for a slot is admitted, and the client knows.
    raw.flushHeaders();
    const write = async (payload: unknown) => {
      if (raw.destroyed || raw.writableEnded) return;
      const ok = raw.write(
        `data: ${typeof payload === 'string' ? payload : JSON.stringify(payload)}\n\n`,
      );
      if (!ok && !raw.destroyed) {
        // Respect back-pressure from slow clients instead of buffering without bound.
        await new Promise<void>((resolve) => {
          const done = () => {
            raw.off('drain', done);
            raw.off('close', done);
            resolve();
          };
          raw.on('drain', done);
          raw.on('close', done);
        });
      }
    };
    const isChat = prepared.kind === 'chat';
    const base = {
      id: prepared.request.id,
      object: isChat ? 'chat.completion.chunk' : 'text_completion',
      created: prepared.created,
      model: prepared.request.model,
    };
    const usageField = prepared.includeUsage ? { usage: null } : {};
    const wantLogprobs = prepared.request.logprobs !== undefined;
    if (isChat) {
      for (let i = 0; i < prepared.request.n; i++) {
        await write({
          ...base,
          choices: [
            {
              index: i,
              delta: { role: 'assistant', content: '' },
              logprobs: null,
              finish_reason: null,
            },
          ],
          ...usageField,
        });
      }
    }
    try {
      const tally = await drive(
        prepared,
        prepared.request,
        stream,
        signal,
        arrived,
        async (index, e) => {
          const logprobs =
            wantLogprobs && e.logprobs.length > 0
              ? isChat
                ? chatLogprobs(e.logprobs)
                : completionLogprobs(e.logprobs, (prepared.request.logprobs ?? 0) > 0)
              : null;
          const choice = isChat
            ? {
                index,
                delta: e.text === '' && e.finishReason !== undefined ? {} : { content: e.text },
                logprobs,
                finish_reason: e.finishReason ?? null,
              }
            : { index, text: e.text, logprobs, finish_reason: e.finishReason ?? null };
          await write({ ...base, choices: [choice], ...usageField });
        },
      );
      if (prepared.includeUsage) {
        await write({ ...base, choices: [], usage: usageJson(tally.usage!) });
      }
    } catch (error) {
      if (raw.destroyed) return;
      const answer = errorAnswer(error);
      metrics.observeError(answer.body.error.code);
      await write(answer.body);
    }
    await write('[DONE]');
    if (!raw.writableEnded) raw.end();
  }

  app.post('/v1/completions', (request, reply) => handle('completion', request, reply));
  app.post('/v1/chat/completions', (request, reply) => handle('chat', request, reply));

  let closing: Promise<void> | undefined;
  return {
    app,
    metrics,
    get inFlight() {
      return inflight.size;
    },
    get draining() {
      return draining;
    },
    async listen() {
      await app.listen({ host, port });
      const address = app.server.address();
      const bound = typeof address === 'object' && address ? address.port : port;
      const shownHost = host.includes(':') ? `[${host}]` : host;
      return `http://${shownHost}:${bound}`;
    },
    close(deadlineMs = shutdownDeadlineMs) {
      closing ??= (async () => {
        draining = true;
        const all = () => Promise.all([...inflight].map((e) => e.done));
        let timer: NodeJS.Timeout | undefined;
        const expired = new Promise<void>((resolve) => {
          timer = setTimeout(resolve, deadlineMs);
        });
        await Promise.race([all(), expired]);
        clearTimeout(timer);
        for (const entry of inflight) {
          entry.controller.abort(
            new EngineError('DRAINING', 'server shut down before the request finished'),
          );
        }
        await all();
        await app.close();
      })();
      return closing;
    },
  };
}
