// The in-page engine as an AI SDK language model (specification v3): `doGenerate` is one chat
// completion, `doStream` its streamed chunks as the spec's stream parts.
import type {
  LanguageModelV3,
  LanguageModelV3CallOptions,
  LanguageModelV3Content,
  LanguageModelV3FinishReason,
  LanguageModelV3GenerateResult,
  LanguageModelV3StreamPart,
  LanguageModelV3StreamResult,
  LanguageModelV3Usage,
  SharedV3Warning,
} from '@ai-sdk/provider';
import type { ChatCompletionChunk, Usage, WebEngine } from '../create-engine.js';
import { chatRequest, type KvasirProviderOptions } from './call-options.js';

/** What the model needs of an engine: `createEngine()`'s, or one shaped like it. */
export type KvasirChatEngine = Pick<WebEngine, 'model' | 'chat'>;

/** Kvasir's finish reasons as the spec's (`abort` never gets here: the request throws). */
export function finishReason(raw: string | null | undefined): LanguageModelV3FinishReason {
  const unified =
    raw === 'stop'
      ? 'stop'
      : raw === 'length'
        ? 'length'
        : raw === 'tool_calls'
          ? 'tool-calls'
          : 'other';
  return { unified, raw: raw ?? undefined };
}

/** The engine's usage as the spec's: the prefix cache's tokens are `cacheRead`. */
export function usageOf(usage: Usage | null | undefined): LanguageModelV3Usage {
  if (!usage) {
    return {
      inputTokens: {
        total: undefined,
        noCache: undefined,
        cacheRead: undefined,
        cacheWrite: undefined,
      },
      outputTokens: { total: undefined, text: undefined, reasoning: undefined },
    };
  }
  const cached = usage.prompt_tokens_details.cached_tokens;
  return {
    inputTokens: {
      total: usage.prompt_tokens,
      noCache: usage.prompt_tokens - cached,
      cacheRead: cached,
      cacheWrite: undefined,
    },
    outputTokens: {
      total: usage.completion_tokens,
      text: usage.completion_tokens,
      reasoning: undefined,
    },
    raw: {
      prompt_tokens: usage.prompt_tokens,
      completion_tokens: usage.completion_tokens,
      total_tokens: usage.total_tokens,
      prompt_tokens_details: { cached_tokens: cached },
    },
  };
}

const TEXT_ID = 'text-0';

/**
 * A {@link KvasirChatEngine}'s chat model for the AI SDK (`LanguageModelV3`): `streamText`,
 * `generateText`, structured output (`Output.object`, JSON response formats) and function
 * tools (calls valid against each tool's input schema), all enforced by the engine's grammar,
 * run in the page, with no server.
 */
export class KvasirLanguageModel implements LanguageModelV3 {
  readonly specificationVersion = 'v3';
  readonly provider = 'kvasir.web';
  readonly modelId: string;
  readonly supportedUrls: Record<string, RegExp[]> = {};
  readonly #engine: KvasirChatEngine;
  readonly #defaults: KvasirProviderOptions;

  constructor(engine: KvasirChatEngine, defaults: KvasirProviderOptions = {}) {
    this.#engine = engine;
    this.#defaults = defaults;
    this.modelId = engine.model.id;
  }

  async doGenerate(options: LanguageModelV3CallOptions): Promise<LanguageModelV3GenerateResult> {
    const { body, warnings } = chatRequest(options, this.#defaults);
    const signal = options.abortSignal;
    const completion = await this.#engine.chat.completions.create(
      { ...body, stream: false },
      signal ? { signal } : {},
    );
    const choice = completion.choices[0];
    const text = choice?.message.content ?? '';
    const content: LanguageModelV3Content[] = text.length > 0 ? [{ type: 'text', text }] : [];
    for (const call of choice?.message.tool_calls ?? []) {
      content.push({
        type: 'tool-call',
        toolCallId: call.id,
        toolName: call.function.name,
        input: call.function.arguments,
      });
    }
    return {
      content,
      finishReason: finishReason(choice?.finish_reason),
      usage: usageOf(completion.usage),
      request: { body },
      response: {
        id: completion.id,
        modelId: completion.model,
        timestamp: new Date(completion.created * 1000),
        body: completion,
      },
      warnings,
    };
  }

  async doStream(options: LanguageModelV3CallOptions): Promise<LanguageModelV3StreamResult> {
    const { body, warnings } = chatRequest(options, this.#defaults);
    const signal = options.abortSignal;
    const chunks = await this.#engine.chat.completions.create(
      { ...body, stream: true, stream_options: { include_usage: true } },
      signal ? { signal } : {},
    );
    return {
      stream: streamParts(chunks, warnings, options.includeRawChunks === true),
      request: { body },
    };
  }
}

/**
 * The spec's stream of a chat completion's chunks: `stream-start`, `response-metadata`, then
 * `text-start` / `text-delta`s / `text-end`, for each tool call `tool-input-start` /
 * `tool-input-delta`s / `tool-input-end` and, once the choice ends, `tool-call` with its whole
 * input, and `finish` with the usage. Pulled as read; a
 * cancelled stream ends the request (its KV blocks come back); an abort errors the stream with
 * the `AbortError`, as a fetch's body does; an engine error mid-stream is an `error` part and
 * finish reason `error`.
 */
export function streamParts(
  chunks: AsyncIterable<ChatCompletionChunk>,
  warnings: SharedV3Warning[],
  includeRaw: boolean,
): ReadableStream<LanguageModelV3StreamPart> {
  const it = chunks[Symbol.asyncIterator]();
  let started = false;
  let textOpen = false;
  /** The choice's calls so far, by their index; `done` once their `tool-call` is sent. */
  const calls: { id: string; name: string; input: string; done: boolean }[] = [];
  let reason: LanguageModelV3FinishReason = { unified: 'other', raw: undefined };
  let usage: Usage | null = null;
  let done = false;
  /** Reads one chunk; true when it enqueued a part or ended the stream. */
  const step = async (
    controller: ReadableStreamDefaultController<LanguageModelV3StreamPart>,
  ): Promise<boolean> => {
    let enqueued = false;
    const emit = (part: LanguageModelV3StreamPart) => {
      controller.enqueue(part);
      enqueued = true;
    };
    const closeText = () => {
      if (textOpen) emit({ type: 'text-end', id: TEXT_ID });
      textOpen = false;
    };
    const closeCalls = () => {
      for (const call of calls) {
        if (call.done) continue;
        call.done = true;
        emit({ type: 'tool-input-end', id: call.id });
        emit({
          type: 'tool-call',
          toolCallId: call.id,
          toolName: call.name,
          input: call.input,
        });
      }
    };
    let next: IteratorResult<ChatCompletionChunk>;
    try {
      next = await it.next();
    } catch (error) {
      done = true;
      if ((error as Error)?.name === 'AbortError') {
        controller.error(error);
        return true;
      }
      closeText();
      controller.enqueue({ type: 'error', error });
      controller.enqueue({
        type: 'finish',
        finishReason: { unified: 'error', raw: undefined },
        usage: usageOf(usage),
      });
      controller.close();
      return true;
    }
    if (next.done) {
      done = true;
      closeText();
      closeCalls();
      controller.enqueue({ type: 'finish', finishReason: reason, usage: usageOf(usage) });
      controller.close();
      return true;
    }
    const chunk = next.value;
    if (includeRaw) emit({ type: 'raw', rawValue: chunk });
    if (!started) {
      started = true;
      emit({
        type: 'response-metadata',
        id: chunk.id,
        modelId: chunk.model,
        timestamp: new Date(chunk.created * 1000),
      });
    }
    if (chunk.usage) usage = chunk.usage;
    const choice = chunk.choices[0];
    if (!choice) return enqueued;
    const delta = choice.delta.content;
    if (delta) {
      if (!textOpen) emit({ type: 'text-start', id: TEXT_ID });
      textOpen = true;
      emit({ type: 'text-delta', id: TEXT_ID, delta });
    }
    for (const d of choice.delta.tool_calls ?? []) {
      if ('id' in d) {
        calls[d.index] = { id: d.id, name: d.function.name, input: '', done: false };
        emit({ type: 'tool-input-start', id: d.id, toolName: d.function.name });
      }
      const call = calls[d.index];
      if (!call || d.function.arguments === '') continue;
      call.input += d.function.arguments;
      emit({ type: 'tool-input-delta', id: call.id, delta: d.function.arguments });
    }
    if (choice.finish_reason) {
      reason = finishReason(choice.finish_reason);
      closeText();
      closeCalls();
    }
    return enqueued;
  };
  return new ReadableStream<LanguageModelV3StreamPart>({
    start(controller) {
      controller.enqueue({ type: 'stream-start', warnings });
    },
    // A pull must enqueue something (or end the stream): a chunk with nothing to say (the
    // usage chunk) reads on, else a pending read would wait for a pull that never comes.
    async pull(controller) {
      while (!done) if (await step(controller)) return;
    },
    async cancel() {
      if (!done) await it.return?.();
    },
  });
}
