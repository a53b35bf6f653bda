import { KvasirError } from '@kvasir/errors';

/** Stable codes of errors the server turns into HTTP responses. */
export type ServerErrorCode =
  | 'INVALID_REQUEST'
  | 'UNAUTHORIZED'
  | 'NOT_FOUND'
  | 'MODEL_NOT_FOUND'
  | 'BODY_TOO_LARGE'
  | 'PROMPT_TOO_LONG'
  | 'QUEUE_FULL'
  | 'DRAINING'
  | 'TIMEOUT'
  | 'INTERNAL'
  | 'INVALID_ENGINE';

/**
 * An error the engine (or the server itself) raises to produce a specific HTTP answer.
 * `details.param` names the offending field; `details.retryAfterSeconds` sets `Retry-After`
 * on `QUEUE_FULL`.
 *
 * @example
 * ```ts
 * throw new EngineError('QUEUE_FULL', 'waiting queue is full (256 requests)', {
 *   details: { retryAfterSeconds: 1 },
 * });
 * ```
 */
export class EngineError extends KvasirError<ServerErrorCode> {}

/** How one error code is answered. */
export interface ErrorMapping {
  readonly status: number;
  /** OpenAI's `error.type`. */
  readonly type: string;
  /** OpenAI's `error.code`. */
  readonly code: string;
}

/** The one table from error codes to HTTP statuses and OpenAI error types. */
export const ERROR_TABLE: Readonly<Record<ServerErrorCode, ErrorMapping>> = {
  INVALID_REQUEST: { status: 400, type: 'invalid_request_error', code: 'invalid_request' },
  UNAUTHORIZED: { status: 401, type: 'authentication_error', code: 'invalid_api_key' },
  NOT_FOUND: { status: 404, type: 'invalid_request_error', code: 'not_found' },
  MODEL_NOT_FOUND: { status: 404, type: 'invalid_request_error', code: 'model_not_found' },
  BODY_TOO_LARGE: { status: 413, type: 'invalid_request_error', code: 'request_too_large' },
  PROMPT_TOO_LONG: { status: 413, type: 'invalid_request_error', code: 'context_length_exceeded' },
  QUEUE_FULL: { status: 429, type: 'rate_limit_error', code: 'queue_full' },
  DRAINING: { status: 503, type: 'service_unavailable', code: 'draining' },
  TIMEOUT: { status: 504, type: 'timeout_error', code: 'timeout' },
  INTERNAL: { status: 500, type: 'internal_error', code: 'internal_error' },
  // Raised when the server is built, never while answering a client.
  INVALID_ENGINE: { status: 500, type: 'internal_error', code: 'internal_error' },
};

/** OpenAI's error body. */
export interface OpenAiErrorBody {
  error: { message: string; type: string; param: string | null; code: string };
}

/** The HTTP answer for an error. */
export interface ErrorAnswer {
  readonly status: number;
  readonly body: OpenAiErrorBody;
  readonly headers: Record<string, string>;
}

/** Fastify's own error codes that callers can cause, mapped onto ours. */
const FASTIFY_CODES: Readonly<Record<string, ServerErrorCode>> = {
  FST_ERR_CTP_BODY_TOO_LARGE: 'BODY_TOO_LARGE',
  FST_ERR_CTP_INVALID_JSON_BODY: 'INVALID_REQUEST',
  FST_ERR_CTP_EMPTY_JSON_BODY: 'INVALID_REQUEST',
  FST_ERR_CTP_INVALID_MEDIA_TYPE: 'INVALID_REQUEST',
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: 'INVALID_REQUEST',
  FST_ERR_CTP_INVALID_TYPE: 'INVALID_REQUEST',
  FST_ERR_BAD_URL: 'INVALID_REQUEST',
};

function codeOf(error: unknown): ServerErrorCode {
  if (KvasirError.isInstance(error) && error.code in ERROR_TABLE) {
    return error.code as ServerErrorCode;
  }
  if (typeof error === 'object' && error !== null) {
    const code = (error as { code?: unknown }).code;
    if (typeof code === 'string' && code in FASTIFY_CODES) return FASTIFY_CODES[code]!;
    // JSON.parse failures surface as SyntaxError with a 400 statusCode from fastify.
    const statusCode = (error as { statusCode?: unknown }).statusCode;
    if (statusCode === 413) return 'BODY_TOO_LARGE';
    // Whatever else the framework refuses before a handler runs is the client's to fix.
    if (typeof statusCode === 'number' && statusCode >= 400 && statusCode < 500) {
      return 'INVALID_REQUEST';
    }
  }
  return 'INTERNAL';
}

/** Turns any thrown value into the HTTP status, OpenAI error body and headers to send. */
export function errorAnswer(error: unknown): ErrorAnswer {
  const code = codeOf(error);
  const mapping = ERROR_TABLE[code];
  const details = KvasirError.isInstance(error) ? error.details : undefined;
  const param = typeof details?.param === 'string' ? details.param : null;
  const headers: Record<string, string> = {};
  if (code === 'QUEUE_FULL') {
    const retry = details?.retryAfterSeconds;
    headers['retry-after'] = String(typeof retry === 'number' && retry > 0 ? Math.ceil(retry) : 1);
  }
  // Internal failures get a generic message: stack traces and paths stay in the log.
  const message =
    code === 'INTERNAL'
      ? 'internal server error'
      : error instanceof Error
        ? error.message
        : String(error);
  return {
    status: mapping.status,
    body: { error: { message, type: mapping.type, param, code: mapping.code } },
    headers,
  };
}
