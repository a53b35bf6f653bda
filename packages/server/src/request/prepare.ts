import { EngineError } from '../errors.js';
import type {
  GenerationRequest,
  InferenceEngine,
  ModelCard,
  OutputConstraint,
} from '../inference-engine.js';
import type { ToolCallSyntax } from '../tools/tool-call-format.js';
import { chatMessages } from './chat-messages.js';
import { checkPrompt, checkPromptBytes } from './prompt-check.js';
import { checkResponseSize, DEFAULT_MAX_RESPONSE_BYTES } from './response-size.js';
import {
  type ChatBody,
  type CompletionBody,
  chatBodySchema,
  completionBodySchema,
  parseBody,
} from './schemas.js';
import { logitBias, outputConstraint } from './structured-output.js';
import { prepareTools } from './tools.js';

/** Which OpenAI endpoint a request came to. */
export type RequestKind = 'completion' | 'chat';

/** An OpenAI body turned into what the engine runs and what the response needs to know. */
export interface PreparedRequest {
  readonly kind: RequestKind;
  /** One request per prompt of a batch, in order; the first carries the response's id. */
  readonly requests: readonly GenerationRequest[];
  /** Completions `echo`: each choice's text and log-probabilities start with its prompt's. */
  readonly echo: boolean;
  /** The prompt text each request echoes when the client sent text (token ids: the engine's). */
  readonly promptTexts: readonly (string | undefined)[];
  readonly stream: boolean;
  readonly includeUsage: boolean;
  /** Unix seconds, shown as `created`. */
  readonly created: number;
  /** How to read tool calls out of each choice's text; undefined when none can be made. */
  readonly toolCalls?: ToolCallSyntax;
}

/** What {@link prepareRequest} needs besides the body. */
export interface PrepareContext {
  /** The engine's models and tokenizer. */
  readonly engine: Pick<
    InferenceEngine,
    'listModels' | 'tokenize' | 'applyChatTemplate' | 'capabilities'
  >;
  /** Largest `n` accepted. */
  readonly maxN: number;
  /**
   * Largest non-streamed answer, in bytes, as estimated before generating (see
   * {@link checkResponseSize}); default 16 MiB. A streamed answer is sent as it is made.
   */
  readonly maxResponseBytes?: number;
  /**
   * Called once the body is valid and its model known, before any tokenizing: throws to refuse
   * the request (the server is draining, the engine is not ready).
   */
  readonly checkAccepting?: () => void;
  /** The response id; default a fresh `cmpl-…` / `chatcmpl-…`. */
  readonly id?: string;
  /** Unix seconds for `created`; default now. */
  readonly created?: number;
}

/**
 * The model a request names, or the engine's first one when it names none.
 * @throws EngineError `MODEL_NOT_FOUND`.
 */
export function findModel(
  engine: Pick<InferenceEngine, 'listModels'>,
  id: string | undefined,
): ModelCard {
  const models = engine.listModels();
  const model = id === undefined ? models[0] : models.find((m) => m.id === id);
  if (!model) {
    throw new EngineError('MODEL_NOT_FOUND', `model '${id ?? ''}' does not exist`, {
      details: { param: 'model' },
    });
  }
  return model;
}

const invalid = (param: string, message: string) =>
  new EngineError('INVALID_REQUEST', `${param}: ${message}`, { details: { param } });

/** The fields of a completions or chat body that differ between the two, made uniform. */
interface Prompts {
  readonly prompts: readonly (string | readonly number[])[];
  readonly logprobs: number | undefined;
  readonly maxTokens: number | null | undefined;
  /** The body field the prompts came from (`prompt`, `messages`). */
  readonly param: string;
  readonly echo: boolean;
  /** The constraint the tool fields add, and how to read calls back. */
  readonly toolConstraint?: OutputConstraint;
  readonly toolCalls?: ToolCallSyntax;
}

function completionPrompts(body: CompletionBody, n: number, stream: boolean): Prompts {
  if (body.best_of != null && body.best_of !== n) {
    throw invalid('best_of', 'only best_of equal to n is supported');
  }
  const prompts =
    typeof body.prompt === 'string' || typeof body.prompt[0] === 'number'
      ? [body.prompt as string | readonly number[]]
      : (body.prompt as readonly (string | readonly number[])[]);
  const echo = body.echo ?? false;
  const maxTokens = body.max_tokens ?? 16;
  if (maxTokens === 0 && !echo) {
    throw invalid('max_tokens', '0 is allowed only with echo (to score the prompt)');
  }
  // The echoed prompt and its log-probabilities are sent whole, before any token.
  if (stream && echo) throw invalid('echo', 'not supported with stream');
  if (stream && prompts.length > 1) {
    throw invalid(
      'prompt',
      'a batch of prompts is not supported with stream; send one request per prompt',
    );
  }
  return { prompts, logprobs: body.logprobs ?? undefined, maxTokens, param: 'prompt', echo };
}

async function chatPrompts(
  body: ChatBody,
  model: ModelCard,
  engine: PrepareContext['engine'],
): Promise<Prompts> {
  const messages = chatMessages(body.messages);
  const tools = prepareTools(body, model);
  const prompts = [
    await (tools.tools
      ? engine.applyChatTemplate(model.id, messages, { tools: tools.tools })
      : engine.applyChatTemplate(model.id, messages)),
  ];
  if (body.top_logprobs != null && !body.logprobs) {
    throw invalid('top_logprobs', 'requires logprobs to be true');
  }
  return {
    prompts,
    logprobs: body.logprobs ? (body.top_logprobs ?? 0) : undefined,
    maxTokens: body.max_completion_tokens ?? body.max_tokens,
    param: 'messages',
    echo: false,
    ...(tools.constraint ? { toolConstraint: tools.constraint } : {}),
    ...(tools.syntax ? { toolCalls: tools.syntax } : {}),
  };
}

/**
 * The request's output constraint: the structured-output fields' or the tools', not both.
 * @throws EngineError `INVALID_REQUEST` naming the field: two constraints, or one the engine
 *   does not enforce.
 */
function requestConstraint(
  body: CompletionBody | ChatBody,
  tools: OutputConstraint | undefined,
  engine: PrepareContext['engine'],
): OutputConstraint | undefined {
  const asked = outputConstraint(body);
  if (asked && tools) {
    throw invalid(
      asked.param ?? 'response_format',
      'not supported together with tools unless tool_choice is none',
    );
  }
  const constraint = asked ?? tools;
  if (constraint && !engine.capabilities?.outputConstraints?.includes(constraint.kind)) {
    const param = constraint.param ?? 'response_format';
    throw invalid(
      param,
      `not supported by this server's engine (it does not enforce ${constraint.kind} output)`,
    );
  }
  return constraint;
}

/**
 * Turns an OpenAI completions or chat body into the engine's requests: validates it, resolves
 * the model, applies the chat template, tokenizes each prompt, checks it against the context
 * and fills every default. Touches nothing but the engine's tokenizer.
 *
 * @example
 * ```ts
 * const prepared = await prepareRequest('completion', { prompt: 'Hi', max_tokens: 4 }, { engine, maxN: 16 });
 * prepared.requests[0].maxTokens; // 4
 * ```
 * @throws EngineError `INVALID_REQUEST` naming the offending field, `MODEL_NOT_FOUND`,
 *   `PROMPT_TOO_LONG`, `INVALID_REQUEST` for an answer too large to send at once, or whatever
 *   `checkAccepting` throws.
 */
export async function prepareRequest(
  kind: RequestKind,
  raw: unknown,
  context: PrepareContext,
): Promise<PreparedRequest> {
  const { engine, maxN } = context;
  const body: CompletionBody | ChatBody =
    kind === 'completion' ? parseBody(completionBodySchema, raw) : parseBody(chatBodySchema, raw);
  const model = findModel(engine, body.model);
  context.checkAccepting?.();

  const n = body.n ?? 1;
  if (n > maxN) throw invalid('n', `at most ${maxN} choices per request`);
  const stream = body.stream ?? false;
  const {
    prompts,
    logprobs,
    maxTokens,
    param: promptParam,
    echo,
    toolConstraint,
    toolCalls,
  } = kind === 'completion'
    ? completionPrompts(body as CompletionBody, n, stream)
    : await chatPrompts(body as ChatBody, model, engine);
  const constraint = requestConstraint(body, toolConstraint, engine);
  const bias = logitBias(body);
  if (bias && !engine.capabilities?.logitBias) {
    throw invalid('logit_bias', "not supported by this server's engine");
  }
  const stop = body.stop == null ? [] : typeof body.stop === 'string' ? [body.stop] : body.stop;
  const stopStrings = stop.filter((s) => s.length > 0);
  const id =
    context.id ??
    `${kind === 'chat' ? 'chatcmpl' : 'cmpl'}-${globalThis.crypto.randomUUID().replaceAll('-', '')}`;
  const kvCompression = body.kv_compression ?? undefined;
  // A compressed cache positions tokens by their place in it: the request may outrun the
  // context (the engine refuses policies that cannot, such as a whole prompt longer than it).
  const unbounded =
    kvCompression !== undefined
      ? kvCompression.positions !== 'original'
      : model.unboundedContext === true;
  const paramOf = (i: number) => (prompts.length > 1 ? `${promptParam}[${i}]` : promptParam);
  // Texts that cannot fit the context are refused before any of the batch is tokenized.
  if (!unbounded) {
    for (const [i, prompt] of prompts.entries()) {
      if (typeof prompt === 'string') checkPromptBytes(model, prompt, paramOf(i));
    }
  }
  const requests: GenerationRequest[] = [];
  for (const [i, prompt] of prompts.entries()) {
    const param = paramOf(i);
    const promptTokens =
      typeof prompt === 'string' ? await engine.tokenize(model.id, prompt) : prompt;
    const left = checkPrompt(model, promptTokens, param, unbounded);
    const room = unbounded ? model.maxModelLen : left;
    // Completions without max_tokens get the default cut to the room left, as OpenAI does.
    const explicit = kind === 'chat' || body.max_tokens != null;
    if (!unbounded && maxTokens != null && maxTokens > room && explicit) {
      const field =
        kind === 'chat' && (body as ChatBody).max_completion_tokens != null
          ? 'max_completion_tokens'
          : 'max_tokens';
      throw invalid(
        field,
        `${maxTokens} + ${promptTokens.length} prompt tokens${prompts.length > 1 ? ` of ${param}` : ''} exceed the model's context of ${model.maxModelLen}`,
      );
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
        ...(bias ? { logitBias: bias } : {}),
      },
      ...(logprobs === undefined ? {} : { logprobs }),
      stopTokenIds: body.stop_token_ids ?? [],
      ...(stopStrings.length > 0 ? { stopStrings } : {}),
      ignoreEos: body.ignore_eos ?? false,
      ...(echo ? { echo: true } : {}),
      ...(kvCompression ? { kvCompression } : {}),
      ...(constraint ? { constraint } : {}),
    });
  }
  if (!stream) {
    checkResponseSize({
      prompts: requests.map((r, i) => {
        const prompt = prompts[i];
        return {
          tokens: r.promptTokens.length,
          maxTokens: r.maxTokens,
          ...(typeof prompt === 'string' ? { textBytes: Buffer.byteLength(prompt) } : {}),
        };
      }),
      n,
      echo,
      logprobs,
      maxBytes: context.maxResponseBytes ?? DEFAULT_MAX_RESPONSE_BYTES,
    });
  }
  return {
    kind,
    requests,
    echo,
    promptTexts: prompts.map((p) => (typeof p === 'string' ? p : undefined)),
    stream,
    includeUsage: body.stream_options?.include_usage ?? false,
    created: context.created ?? Math.floor(Date.now() / 1000),
    ...(toolCalls ? { toolCalls } : {}),
  };
}
