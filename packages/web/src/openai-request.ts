import type { OutputConstraint } from '@kvasir/server/spec';
import { WebEngineError } from './errors.js';
import type { GenerateParams } from './protocol.js';

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
