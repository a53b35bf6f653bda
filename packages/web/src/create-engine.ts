import type { EngineSettings } from '@kvasir/engine';
import type { FinishReason, GenerationEvent } from '@kvasir/server/spec';
import {
  type ToolCallDeltaJson,
  type ToolCallSyntax,
  toolCallChunks,
  toolCallMessage,
  toolCallParser,
} from '@kvasir/server/tools';
import type { BackendReport, WebBackendChoice } from './backend-choice.js';
import { fromErrorData, WebEngineError } from './errors.js';
import {
  type ChatCompletionMessage,
  chatInput,
  generateParams,
  type SamplingFields,
  type ToolRequestFields,
} from './openai-request.js';
import { type KvTierReport, opfsOption } from './opfs-option.js';
import type {
  FromWorker,
  GenerateMessage,
  ModelInfo,
  ModelSourceData,
  ToWorker,
  WebEngineStats,
  WebKvSnapshot,
} from './protocol.js';

/** Options of {@link createEngine}. */
export interface CreateEngineOptions {
  /** The GGUF: a URL (fetched, kept in Cache Storage), a `File` / `Blob`, or its bytes. */
  readonly model: string | URL | Blob | ArrayBuffer | Uint8Array;
  /** The model's name for a `Blob` or bytes (default `model.gguf`; a `File` has its own). */
  readonly modelName?: string;
  /** `auto` (default): WebGPU on a hardware adapter, else wasm threads, else one thread. */
  readonly backend?: WebBackendChoice;
  /** Threads of the wasm backend (default: the cores, at most 16). */
  readonly threads?: number;
  /** Bytes of the paged KV cache (default 64 MiB). */
  readonly kvCacheBytes?: number;
  /** Tokens per KV block (default 16). */
  readonly blockSize?: number;
  /** Engine settings (batch limits, prefix caching, ...); `kvasir serve`'s defaults otherwise. */
  readonly settings?: Partial<EngineSettings>;
  /** Keep a downloaded model in Cache Storage and look there first (default true). */
  readonly cache?: boolean;
  /**
   * The KV tier in the Origin Private File System (default off): full prefix blocks are written
   * there behind the cache, so after a reload, or in another tab of the origin, a prompt with
   * the same prefix (a system prompt) finds its KV instead of computing it. `true` gives it
   * 256 MiB for this model; `{ maxBytes }` bounds it. {@link WebEngine.kvTier} says whether
   * it is on.
   */
  readonly opfs?: boolean | { readonly maxBytes?: number };
  /** Download and load progress, in bytes. */
  readonly onProgress?: (progress: {
    readonly phase: 'download' | 'load';
    readonly loaded: number;
    readonly total?: number;
  }) => void;
  /** The worker to run in (default: this package's `worker.js`, beside this module). */
  readonly worker?: Worker | URL | string;
}

/** Token counts of a request, OpenAI's shape; `cached_tokens` came from the prefix cache. */
export interface Usage {
  readonly prompt_tokens: number;
  readonly completion_tokens: number;
  readonly total_tokens: number;
  readonly prompt_tokens_details: { readonly cached_tokens: number };
}

/** One call of an assistant message, OpenAI's `message.tool_calls[i]`. */
export interface ChatCompletionMessageToolCall {
  /** `call_` and 24 alphanumerics (9 alphanumerics for Mistral's template). */
  readonly id: string;
  readonly type: 'function';
  /** The arguments as the JSON text the model wrote, valid against the tool's schema. */
  readonly function: { readonly name: string; readonly arguments: string };
}

/** A streamed piece of a call, OpenAI's `delta.tool_calls[i]`: its first has the id and name. */
export type ChatCompletionChunkToolCall = ToolCallDeltaJson;

/** Why a chat choice ended: `tool_calls` when it ended after calling tools. */
export type ChatFinishReason = 'stop' | 'length' | 'tool_calls';

/** OpenAI's chat completion. */
export interface ChatCompletion {
  readonly id: string;
  readonly object: 'chat.completion';
  readonly created: number;
  readonly model: string;
  readonly choices: readonly {
    readonly index: number;
    readonly message: {
      readonly role: 'assistant';
      /** Null when the choice called tools and said nothing else. */
      readonly content: string | null;
      readonly tool_calls?: readonly ChatCompletionMessageToolCall[];
    };
    readonly finish_reason: ChatFinishReason;
    readonly logprobs: null;
  }[];
  readonly usage: Usage;
}

/** One chunk of a streamed chat completion. */
export interface ChatCompletionChunk {
  readonly id: string;
  readonly object: 'chat.completion.chunk';
  readonly created: number;
  readonly model: string;
  readonly choices: readonly {
    readonly index: number;
    readonly delta: {
      readonly role?: 'assistant';
      readonly content?: string;
      readonly tool_calls?: readonly ChatCompletionChunkToolCall[];
    };
    readonly finish_reason: ChatFinishReason | null;
    readonly logprobs: null;
  }[];
  /** On the last chunk with `stream_options.include_usage`, else null. */
  readonly usage: Usage | null;
}

/** One chunk of a streamed (legacy) text completion. */
export interface CompletionChunk {
  readonly id: string;
  readonly object: 'text_completion';
  readonly created: number;
  readonly model: string;
  readonly choices: readonly {
    readonly index: number;
    readonly text: string;
    readonly finish_reason: 'stop' | 'length' | null;
    readonly logprobs: null;
  }[];
  /** On the last chunk with `stream_options.include_usage`, else null. */
  readonly usage: Usage | null;
}

/** OpenAI's (legacy) text completion. */
export interface Completion extends CompletionChunk {
  readonly choices: readonly {
    readonly index: number;
    readonly text: string;
    readonly finish_reason: 'stop' | 'length';
    readonly logprobs: null;
  }[];
  readonly usage: Usage;
}

/** `chat.completions.create`'s body. */
export interface ChatCompletionRequest extends SamplingFields, ToolRequestFields {
  readonly messages: readonly ChatCompletionMessage[];
  readonly model?: string;
  readonly stream?: boolean | null;
}

/** `completions.create`'s body: a text prompt, or token ids. */
export interface CompletionRequest extends SamplingFields {
  readonly prompt: string | readonly number[];
  readonly model?: string;
  readonly stream?: boolean | null;
}

/** The second argument of `create`, as the OpenAI client's. */
export interface RequestOptions {
  readonly signal?: AbortSignal;
}

type Outcome = { value: FromWorker } | { end: true } | { error: Error };

/** One request's messages from the worker, read in order. */
class Inbox {
  readonly #items: Outcome[] = [];
  #wake: (() => void) | undefined;
  push(item: Outcome): void {
    this.#items.push(item);
    this.#wake?.();
  }
  /** Drops what is queued: the next read fails at once (an abort does not wait for events). */
  fail(error: Error): void {
    this.#items.length = 0;
    this.push({ error });
  }
  async next(): Promise<Outcome> {
    while (this.#items.length === 0) await new Promise<void>((r) => (this.#wake = r));
    this.#wake = undefined;
    return this.#items.shift()!;
  }
}

const abortError = () => new DOMException('the request was aborted', 'AbortError');
const finish = (reason: FinishReason | undefined): 'stop' | 'length' | null =>
  reason === 'stop' || reason === 'length' ? reason : null;

/**
 * The engine in its worker, driven with an API shaped like the OpenAI client's (and WebLLM's
 * `MLCEngine`): `chat.completions.create` and `completions.create`, streaming or not, with an
 * `AbortSignal`. Requests run concurrently, batched step by step over one paged KV cache.
 */
export class WebEngine {
  /** The backend it runs on and why. */
  readonly backend: BackendReport;
  /** The loaded model. */
  readonly model: ModelInfo;
  /** Whether the OPFS KV tier is on, and why. */
  readonly kvTier: KvTierReport;
  readonly chat = {
    completions: {
      create: ((body: ChatCompletionRequest, options?: RequestOptions) =>
        this.#create('chat', body, options)) as {
        (
          body: ChatCompletionRequest & { stream: true },
          options?: RequestOptions,
        ): Promise<AsyncIterable<ChatCompletionChunk>>;
        (
          body: ChatCompletionRequest & { stream?: false | null },
          options?: RequestOptions,
        ): Promise<ChatCompletion>;
        (
          body: ChatCompletionRequest,
          options?: RequestOptions,
        ): Promise<ChatCompletion | AsyncIterable<ChatCompletionChunk>>;
      },
    },
  };
  readonly completions = {
    create: ((body: CompletionRequest, options?: RequestOptions) =>
      this.#create('completion', body, options)) as {
      (
        body: CompletionRequest & { stream: true },
        options?: RequestOptions,
      ): Promise<AsyncIterable<CompletionChunk>>;
      (
        body: CompletionRequest & { stream?: false | null },
        options?: RequestOptions,
      ): Promise<Completion>;
      (
        body: CompletionRequest,
        options?: RequestOptions,
      ): Promise<Completion | AsyncIterable<CompletionChunk>>;
    },
  };
  readonly #worker: Worker;
  readonly #inboxes: Map<string, Inbox>;
  #next = 0;
  #stopped: Error | undefined;

  /** @internal Made by {@link createEngine}. */
  constructor(
    worker: Worker,
    inboxes: Map<string, Inbox>,
    backend: BackendReport,
    model: ModelInfo,
    kvTier: KvTierReport,
  ) {
    this.#worker = worker;
    this.#inboxes = inboxes;
    this.backend = backend;
    this.model = model;
    this.kvTier = kvTier;
    worker.addEventListener('error', (e) =>
      this.#fail(new WebEngineError('ENGINE_STOPPED', `the engine's worker failed: ${e.message}`)),
    );
  }

  #fail(error: Error): void {
    this.#stopped = error;
    for (const inbox of this.#inboxes.values()) inbox.push({ error });
    this.#inboxes.clear();
  }

  #send(message: ToWorker): void {
    if (this.#stopped) throw this.#stopped;
    this.#worker.postMessage(message);
  }

  #open(prefix: string): { id: string; inbox: Inbox } {
    const id = `${prefix}-${++this.#next}-${Math.random().toString(36).slice(2, 10)}`;
    const inbox = new Inbox();
    this.#inboxes.set(id, inbox);
    return { id, inbox };
  }

  async #create(
    kind: 'chat' | 'completion',
    body: ChatCompletionRequest | CompletionRequest,
    options: RequestOptions = {},
  ): Promise<unknown> {
    let params = generateParams(body);
    let input: GenerateMessage['input'];
    let toolCalls: ToolCallSyntax | undefined;
    if (kind === 'chat') {
      const chat = chatInput(body as ChatCompletionRequest, this.model, params.constraint);
      const { constraint: _, ...rest } = params;
      params = { ...rest, ...(chat.constraint ? { constraint: chat.constraint } : {}) };
      input = { kind, messages: chat.messages, ...(chat.tools ? { tools: chat.tools } : {}) };
      toolCalls = chat.toolCalls;
    } else {
      input = { kind, prompt: (body as CompletionRequest).prompt };
    }
    const signal = options.signal;
    if (signal?.aborted) throw abortError();
    const { id, inbox } = this.#open(kind === 'chat' ? 'chatcmpl' : 'cmpl');
    const onAbort = () => {
      if (!this.#stopped) this.#worker.postMessage({ type: 'abort', id } satisfies ToWorker);
      inbox.fail(abortError());
    };
    signal?.addEventListener('abort', onAbort, { once: true });
    const done = () => {
      signal?.removeEventListener('abort', onAbort);
      this.#inboxes.delete(id);
    };
    try {
      this.#send({ type: 'generate', id, input, params });
      const first = await inbox.next();
      if ('error' in first) throw first.error;
      if ('end' in first) throw new WebEngineError('ENGINE', 'the request ended before it started');
      const m = first.value;
      if (m.type === 'error') throw fromErrorData(m.error);
      if (m.type !== 'started')
        throw new WebEngineError('ENGINE', `unexpected ${m.type} from the worker`);
      const meta = { id, created: m.created, model: this.model.id };
      const events = this.#events(inbox, done);
      if (body.stream) {
        return kind === 'chat'
          ? chatChunks(events, meta, body.stream_options?.include_usage === true, toolCalls)
          : completionChunks(events, meta, body.stream_options?.include_usage === true);
      }
      return await collect(kind, events, meta, params.n, toolCalls);
    } catch (error) {
      done();
      throw error;
    }
  }

  async *#events(inbox: Inbox, done: () => void): AsyncGenerator<GenerationEvent> {
    try {
      for (;;) {
        const item = await inbox.next();
        if ('error' in item) throw item.error;
        if ('end' in item) return;
        const m = item.value;
        if (m.type === 'event') yield m.event;
        else if (m.type === 'end') return;
        else if (m.type === 'error') throw fromErrorData(m.error);
      }
    } finally {
      done();
    }
  }

  async #call<T extends FromWorker['type']>(
    type: 'stats' | 'kv-snapshot' | 'dispose',
    expect: T,
  ): Promise<Extract<FromWorker, { type: T }>> {
    const { id, inbox } = this.#open(type);
    try {
      this.#send({ type, id });
      const item = await inbox.next();
      if ('error' in item) throw item.error;
      if ('end' in item || item.value.type !== expect) {
        throw 'value' in item && item.value.type === 'error'
          ? fromErrorData(item.value.error)
          : new WebEngineError('ENGINE', `no ${expect} from the worker`);
      }
      return item.value as Extract<FromWorker, { type: T }>;
    } finally {
      this.#inboxes.delete(id);
    }
  }

  /** The engine's statistics: blocks (used, cached, free), requests, prefix hits, and `steps` run. */
  async stats(): Promise<WebEngineStats> {
    return (await this.#call('stats', 'stats')).stats;
  }

  /**
   * The paged KV cache now: each block's reference count and whether the prefix cache can find
   * it, each live request's block table (keyed by the `id` its chunks carry), and the engine's
   * statistics read at the same moment. The worker builds it only when asked.
   */
  async kvSnapshot(): Promise<WebKvSnapshot> {
    return (await this.#call('kv-snapshot', 'kv-snapshot')).snapshot;
  }

  /** Stops the engine (open requests end), frees the model and ends the worker. */
  async dispose(): Promise<void> {
    if (this.#stopped) return;
    try {
      await this.#call('dispose', 'disposed');
    } finally {
      this.#fail(new WebEngineError('ENGINE_STOPPED', 'the engine was disposed'));
      this.#worker.terminate();
    }
  }
}

interface Meta {
  readonly id: string;
  readonly created: number;
  readonly model: string;
}

function usageOf(event: Extract<GenerationEvent, { kind: 'usage' }>): Usage {
  return {
    prompt_tokens: event.promptTokens,
    completion_tokens: event.completionTokens,
    total_tokens: event.promptTokens + event.completionTokens,
    prompt_tokens_details: { cached_tokens: event.cachedPromptTokens ?? 0 },
  };
}

async function collect(
  kind: 'chat' | 'completion',
  events: AsyncIterable<GenerationEvent>,
  meta: Meta,
  n: number,
  toolCalls: ToolCallSyntax | undefined,
): Promise<ChatCompletion | Completion> {
  const text = Array.from({ length: n }, () => '');
  const reasons: ('stop' | 'length')[] = Array.from({ length: n }, () => 'length');
  let usage: Usage | undefined;
  for await (const e of events) {
    if (e.kind === 'delta') {
      text[e.index] += e.text;
      if (e.finishReason === 'abort') throw abortError();
      const r = finish(e.finishReason);
      if (r) reasons[e.index] = r;
    } else if (e.kind === 'usage') usage = usageOf(e);
  }
  const u =
    usage ??
    usageOf({ kind: 'usage', promptTokens: 0, cachedPromptTokens: 0, completionTokens: 0 });
  if (kind === 'chat') {
    return {
      ...meta,
      object: 'chat.completion',
      choices: text.map((content, index) => {
        if (!toolCalls) {
          return {
            index,
            message: { role: 'assistant', content },
            finish_reason: reasons[index]!,
            logprobs: null,
          };
        }
        const { finish_reason, ...message } = toolCallMessage(toolCalls, content, reasons[index]!);
        return {
          index,
          message: { role: 'assistant', ...message },
          finish_reason: finish_reason as ChatFinishReason,
          logprobs: null,
        };
      }),
      usage: u,
    };
  }
  return {
    ...meta,
    object: 'text_completion',
    choices: text.map((t, index) => ({
      index,
      text: t,
      finish_reason: reasons[index]!,
      logprobs: null,
    })),
    usage: u,
  };
}

async function* chatChunks(
  events: AsyncIterable<GenerationEvent>,
  meta: Meta,
  includeUsage: boolean,
  toolCalls: ToolCallSyntax | undefined,
): AsyncGenerator<ChatCompletionChunk> {
  const started = new Set<number>();
  const chunk = (
    choices: ChatCompletionChunk['choices'],
    usage: Usage | null = null,
  ): ChatCompletionChunk => ({
    ...meta,
    object: 'chat.completion.chunk',
    choices,
    usage,
  });
  const parsers = new Map<number, ReturnType<typeof toolCallParser>>();
  for await (const e of events) {
    if (e.kind === 'delta') {
      if (e.finishReason === 'abort') throw abortError();
      if (toolCalls) {
        // The text splits into content and call deltas (held back while it may open a call).
        const parser = parsers.get(e.index) ?? toolCallParser(toolCalls);
        parsers.set(e.index, parser);
        for (const c of toolCallChunks(parser, e.text, finish(e.finishReason) ?? undefined)) {
          const first = !started.has(e.index);
          started.add(e.index);
          yield chunk([
            {
              index: e.index,
              delta: { ...(first ? { role: 'assistant' as const } : {}), ...c.delta },
              finish_reason: c.finish_reason as ChatFinishReason | null,
              logprobs: null,
            },
          ]);
        }
        continue;
      }
      const first = !started.has(e.index);
      started.add(e.index);
      yield chunk([
        {
          index: e.index,
          delta: { ...(first ? { role: 'assistant' as const } : {}), content: e.text },
          finish_reason: finish(e.finishReason),
          logprobs: null,
        },
      ]);
    } else if (e.kind === 'usage' && includeUsage) {
      yield chunk([], usageOf(e));
    }
  }
}

async function* completionChunks(
  events: AsyncIterable<GenerationEvent>,
  meta: Meta,
  includeUsage: boolean,
): AsyncGenerator<CompletionChunk> {
  for await (const e of events) {
    if (e.kind === 'delta') {
      if (e.finishReason === 'abort') throw abortError();
      yield {
        ...meta,
        object: 'text_completion',
        choices: [
          { index: e.index, text: e.text, finish_reason: finish(e.finishReason), logprobs: null },
        ],
        usage: null,
      };
    } else if (e.kind === 'usage' && includeUsage) {
      yield { ...meta, object: 'text_completion', choices: [], usage: usageOf(e) };
    }
  }
}

function modelSource(options: CreateEngineOptions): {
  data: ModelSourceData;
  transfer: Transferable[];
} {
  const m = options.model;
  const name = options.modelName ?? 'model.gguf';
  if (typeof m === 'string' || m instanceof URL) {
    const base = typeof location === 'undefined' ? undefined : location.href;
    return { data: { kind: 'url', url: new URL(String(m), base).href }, transfer: [] };
  }
  if (typeof Blob !== 'undefined' && m instanceof Blob) {
    return { data: { kind: 'file', file: m, name: (m as File).name || name }, transfer: [] };
  }
  if (m instanceof ArrayBuffer) {
    const bytes = m.slice(0);
    return { data: { kind: 'bytes', bytes, name }, transfer: [bytes] };
  }
  if (m instanceof Uint8Array) {
    const bytes = m.slice().buffer as ArrayBuffer;
    return { data: { kind: 'bytes', bytes, name }, transfer: [bytes] };
  }
  throw new WebEngineError(
    'INVALID_REQUEST',
    'model: a URL, a File or Blob, or an ArrayBuffer / Uint8Array',
    {
      details: { param: 'model' },
    },
  );
}

/**
 * Starts the engine in a dedicated Web Worker and loads the model there: downloaded with
 * progress and kept in Cache Storage (a reload reads it from there, with no network request),
 * on the backend `auto` picks (see {@link WebEngine.backend} for which and why).
 * @throws WebEngineError `MODEL_LOAD`, `QUOTA`, `BACKEND` or `INVALID_REQUEST` naming what is wrong.
 */
export async function createEngine(options: CreateEngineOptions): Promise<WebEngine> {
  const { data, transfer } = modelSource(options);
  // The default is written out as `new Worker(new URL(...), ...)`: the pattern bundlers (Vite,
  // webpack 5, Parcel) recognise, to bundle the worker and its imports as one more entry.
  const worker =
    options.worker instanceof Worker
      ? options.worker
      : options.worker !== undefined
        ? new Worker(options.worker, { type: 'module' })
        : new Worker(new URL('./worker.js', import.meta.url), { type: 'module' });
  const inboxes = new Map<string, Inbox>();
  opfsOption(options.opfs);
  const ready = new Promise<{
    backend: BackendReport;
    model: ModelInfo;
    kvTier: KvTierReport;
  }>((resolve, reject) => {
    worker.addEventListener('error', (e) =>
      reject(
        new WebEngineError(
          'ENGINE_STOPPED',
          `the engine's worker failed to start: ${e.message || 'its script did not load (a wrong worker URL, or a bundler that copied worker.js instead of bundling it)'}`,
        ),
      ),
    );
    worker.addEventListener('message', (e: MessageEvent<FromWorker>) => {
      const m = e.data;
      switch (m.type) {
        case 'progress':
          options.onProgress?.({
            phase: m.phase,
            loaded: m.loaded,
            ...(m.total === undefined ? {} : { total: m.total }),
          });
          return;
        case 'ready':
          resolve({ backend: m.backend, model: m.model, kvTier: m.kvTier });
          return;
        case 'init-error':
          reject(fromErrorData(m.error));
          return;
        default:
          if ('id' in m) inboxes.get(m.id)?.push(m.type === 'end' ? { end: true } : { value: m });
      }
    });
  });
  worker.postMessage(
    {
      type: 'init',
      model: data,
      backend: options.backend ?? 'auto',
      ...(options.threads === undefined ? {} : { threads: options.threads }),
      kvCacheBytes: options.kvCacheBytes ?? 64 * 1024 * 1024,
      blockSize: options.blockSize ?? 16,
      settings: options.settings ?? {},
      cache: options.cache ?? true,
      ...(options.opfs === undefined ? {} : { opfs: options.opfs }),
    } satisfies ToWorker,
    transfer,
  );
  try {
    const { backend, model, kvTier } = await ready;
    return new WebEngine(worker, inboxes, backend, model, kvTier);
  } catch (error) {
    worker.terminate();
    throw error;
  }
}
