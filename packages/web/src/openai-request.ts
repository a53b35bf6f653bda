import type { ChatMessage, FunctionTool, OutputConstraint } from '@kvasir/server/spec';
import {
  chatMessages,
  type OpenAIChatMessage,
  prepareTools,
  type ToolCallSyntax,
  type ToolFields,
} from '@kvasir/server/tools';
import { errorData, fromErrorData, WebEngineError } from './errors.js';
import type { GenerateParams, ModelInfo } from './protocol.js';

/** The request fields shared by chat and completions, as the OpenAI client names them. */
export interface SamplingFields {
  /** Tokens to generate at most (default 256). */
  max_tokens?: number | null;
  /** OpenAI's newer name of `max_tokens` for chat. */
  max_completion_tokens?: number | null;
  /** 0 is greedy (default 1). */
  temperature?: number | null;
  top_p?: number | null;
  /** Kvasir's (and vLLM's) top-k; 0 or -1 disables it. */
  top_k?: number | null;
  min_p?: number | null;
  presence_penalty?: number | null;
  frequency_penalty?: number | null;
  repetition_penalty?: number | null;
  seed?: number | null;
  /** Strings that end a choice; never sent. */
  stop?: string | readonly string[] | null;
  /** Choices (share the prompt's KV blocks). */
  n?: number | null;
  logit_bias?: Readonly<Record<string, number>> | null;
  /** Generate past end-of-sequence (benchmarks). */
  ignore_eos?: boolean;
  /** Token-level KV compression (`{ policy: 'window', window: 512 }`), as the server takes it. */
  kv_compression?: { readonly policy: string; readonly [key: string]: unknown } | null;
  /**
   * Structured output, as OpenAI's: `{ type: 'json_object' }`, or `{ type: 'json_schema',
   * json_schema: { name, schema } }` (every choice matches the schema); `text` is none.
   */
  response_format?: ResponseFormat | null;
  /** Ask for the usage in the last chunk of a stream. */
  stream_options?: { include_usage?: boolean } | null;
}

/** OpenAI's `response_format`. */
export type ResponseFormat =
  | { readonly type: 'text' }
  | { readonly type: 'json_object' }
  | {
      readonly type: 'json_schema';
      readonly json_schema: {
        readonly name?: string;
        readonly schema?: unknown;
        readonly strict?: boolean | null;
      };
    };

/**
 * The engine's output constraint of `response_format` (undefined for none or `text`).
 * @throws WebEngineError `INVALID_REQUEST` naming `response_format` for another shape.
 */
function outputConstraint(format: ResponseFormat | null | undefined): OutputConstraint | undefined {
  if (format === undefined || format === null || format.type === 'text') return undefined;
  if (format.type === 'json_object') return { kind: 'json_object', param: 'response_format' };
  if (format.type === 'json_schema' && typeof format.json_schema === 'object') {
    const schema = format.json_schema.schema;
    return schema === undefined
      ? { kind: 'json_object', param: 'response_format' }
      : { kind: 'json_schema', schema, param: 'response_format' };
  }
  throw new WebEngineError(
    'INVALID_REQUEST',
    "response_format: { type: 'text' | 'json_object' } or { type: 'json_schema', json_schema: { schema } }",
    { details: { param: 'response_format' } },
  );
}

function number(
  value: number | null | undefined,
  param: string,
  fallback: number,
  ok: (v: number) => boolean,
  rule: string,
): number {
  if (value === undefined || value === null) return fallback;
  if (typeof value !== 'number' || !Number.isFinite(value) || !ok(value)) {
    throw new WebEngineError('INVALID_REQUEST', `${param}: ${rule}, got ${String(value)}`, {
      details: { param },
    });
  }
  return value;
}

/**
 * The engine's parameters of a request, checked: each wrong field is an `INVALID_REQUEST`
 * naming it, as the server's 400s do.
 * @throws WebEngineError `INVALID_REQUEST` with `details.param`.
 */
export function generateParams(body: SamplingFields): GenerateParams {
  const maxTokens = body.max_completion_tokens ?? body.max_tokens;
  const stop =
    body.stop === undefined || body.stop === null
      ? []
      : typeof body.stop === 'string'
        ? [body.stop]
        : [...body.stop];
  if (stop.some((s) => typeof s !== 'string') || stop.length > 4) {
    throw new WebEngineError('INVALID_REQUEST', 'stop: a string or up to 4 strings', {
      details: { param: 'stop' },
    });
  }
  let logitBias: Record<number, number> | undefined;
  if (body.logit_bias) {
    logitBias = {};
    for (const [id, bias] of Object.entries(body.logit_bias)) {
      const tokenId = Number(id);
      if (
        !Number.isInteger(tokenId) ||
        tokenId < 0 ||
        typeof bias !== 'number' ||
        bias < -100 ||
        bias > 100
      ) {
        throw new WebEngineError(
          'INVALID_REQUEST',
          `logit_bias: token ids to biases in [-100, 100], got ${id}: ${bias}`,
          {
            details: { param: 'logit_bias' },
          },
        );
      }
      logitBias[tokenId] = bias;
    }
  }
  const int = (v: number) => Number.isInteger(v);
  const constraint = outputConstraint(body.response_format);
  return {
    n: number(body.n, 'n', 1, (v) => int(v) && v >= 1 && v <= 16, 'an integer from 1 to 16'),
    maxTokens: number(
      maxTokens,
      body.max_completion_tokens != null ? 'max_completion_tokens' : 'max_tokens',
      256,
      (v) => int(v) && v >= 1,
      'an integer of at least 1',
    ),
    temperature: number(body.temperature, 'temperature', 1, (v) => v >= 0 && v <= 2, 'from 0 to 2'),
    topP: number(body.top_p, 'top_p', 1, (v) => v > 0 && v <= 1, 'in (0, 1]'),
    topK: Math.max(
      0,
      number(body.top_k, 'top_k', 0, (v) => int(v) && v >= -1, 'an integer, -1 or 0 for none'),
    ),
    minP: number(body.min_p, 'min_p', 0, (v) => v >= 0 && v <= 1, 'from 0 to 1'),
    presencePenalty: number(
      body.presence_penalty,
      'presence_penalty',
      0,
      (v) => v >= -2 && v <= 2,
      'from -2 to 2',
    ),
    frequencyPenalty: number(
      body.frequency_penalty,
      'frequency_penalty',
      0,
      (v) => v >= -2 && v <= 2,
      'from -2 to 2',
    ),
    repetitionPenalty: number(
      body.repetition_penalty,
      'repetition_penalty',
      1,
      (v) => v > 0,
      'above 0',
    ),
    ...(body.seed === undefined || body.seed === null
      ? {}
      : { seed: number(body.seed, 'seed', 0, int, 'an integer') }),
    stop,
    ...(logitBias ? { logitBias } : {}),
    ignoreEos: body.ignore_eos === true,
    ...(body.kv_compression ? { kvCompression: body.kv_compression } : {}),
    ...(constraint ? { constraint } : {}),
  };
}

/** A chat request's messages, as OpenAI's (`tool_calls` on assistant turns, `role: 'tool'`). */
export type ChatCompletionMessage = OpenAIChatMessage;

/**
 * A chat request's tool fields, as OpenAI's: `tools` (function tools with a JSON Schema of
 * their arguments), `tool_choice` (`auto` by default, `none`, `required`, or
 * `{ type: 'function', function: { name } }`) and `parallel_tool_calls` (default true).
 */
export type ToolRequestFields = ToolFields;

/** What a chat request's messages and tools become. */
export interface ChatInput {
  readonly messages: ChatMessage[];
  /** For the chat template; undefined without tools. */
  readonly tools?: readonly FunctionTool[];
  /** The request's output constraint: the tools' or `response_format`'s. */
  readonly constraint?: OutputConstraint;
  /** How to read the calls back; undefined when none can be made. */
  readonly toolCalls?: ToolCallSyntax;
}

const invalid = (param: string, message: string) =>
  new WebEngineError('INVALID_REQUEST', `${param}: ${message}`, { details: { param } });

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null;

/** The tool fields' shape (the server's schema checks it there; here nothing else does). */
function checkToolShapes(body: ToolFields): void {
  const { tools, tool_choice: choice, parallel_tool_calls: parallel } = body;
  if (tools != null) {
    if (!Array.isArray(tools)) throw invalid('tools', 'an array of function tools');
    for (const [i, t] of (tools as unknown[]).entries()) {
      const fn = isObject(t) ? t.function : undefined;
      if (!isObject(t) || t.type !== 'function' || !isObject(fn)) {
        throw invalid(`tools[${i}]`, "{ type: 'function', function: { name, parameters } }");
      }
      if (typeof fn.name !== 'string' || !/^[A-Za-z0-9_-]{1,64}$/.test(fn.name)) {
        throw invalid(`tools[${i}].function.name`, 'letters, digits, _ or -, at most 64');
      }
      if (fn.parameters != null && !isObject(fn.parameters)) {
        throw invalid(`tools[${i}].function.parameters`, 'a JSON Schema object');
      }
    }
  }
  const named =
    isObject(choice) &&
    choice.type === 'function' &&
    isObject(choice.function) &&
    typeof choice.function.name === 'string';
  if (choice != null && !named && !['none', 'auto', 'required'].includes(choice as string)) {
    throw invalid(
      'tool_choice',
      "'none', 'auto', 'required' or { type: 'function', function: { name } }",
    );
  }
  if (parallel != null && typeof parallel !== 'boolean') {
    throw invalid('parallel_tool_calls', 'a boolean');
  }
}

/**
 * A chat request's messages and tools for the worker, checked against the loaded model the
 * way the server checks them (the same code): a `tool_choice` naming no declared tool, tools
 * for a model whose template cannot call them, tools beside `response_format`.
 * @throws WebEngineError `INVALID_REQUEST` with `details.param`.
 */
export function chatInput(
  body: ToolFields & { readonly messages: readonly ChatCompletionMessage[] },
  model: Pick<ModelInfo, 'id' | 'toolCallFormat'>,
  format: OutputConstraint | undefined,
): ChatInput {
  if (!Array.isArray(body.messages)) throw invalid('messages', 'an array of chat messages');
  checkToolShapes(body);
  let tools: ReturnType<typeof prepareTools>;
  try {
    tools = prepareTools(body, model);
  } catch (error) {
    // The server's EngineError, as the page's: same code and details.
    throw fromErrorData(errorData(error));
  }
  let messages: ChatMessage[];
  try {
    messages = chatMessages(body.messages);
  } catch (error) {
    throw invalid('messages', `{ role, content, tool_calls?, tool_call_id? }: ${error}`);
  }
  if (format && tools.constraint) {
    throw invalid(
      'response_format',
      'not supported together with tools unless tool_choice is none',
    );
  }
  const constraint = tools.constraint ?? format;
  return {
    messages,
    ...(tools.tools ? { tools: tools.tools } : {}),
    ...(constraint ? { constraint } : {}),
    ...(tools.syntax ? { toolCalls: tools.syntax } : {}),
  };
}
