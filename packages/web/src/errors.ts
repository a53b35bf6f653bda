import { KvasirError } from '@kvasir/errors';

/** Stable codes of `@kvasir/web`'s errors. */
export type WebEngineErrorCode =
  /** A request field the engine cannot use; `details.param` names it. */
  | 'INVALID_REQUEST'
  /** The model could not be downloaded, read or loaded. */
  | 'MODEL_LOAD'
  /** The model does not fit the storage the browser grants this origin (`navigator.storage.estimate()`). */
  | 'QUOTA'
  /** The backend asked for is not available in this page. */
  | 'BACKEND'
  /** The engine refused or failed a request (queue full, prompt too long, ...); `details.engineCode`. */
  | 'ENGINE'
  /** The engine was disposed, or its worker died. */
  | 'ENGINE_STOPPED';

/** An error of `@kvasir/web`. Errors cross the worker boundary as this class, code kept. */
export class WebEngineError extends KvasirError<WebEngineErrorCode> {}

/** What crosses `postMessage` for an error (an Error's prototype does not). */
export interface ErrorData {
  readonly name: string;
  readonly code?: string;
  readonly message: string;
  readonly details?: Readonly<Record<string, unknown>>;
}

/** An error as {@link ErrorData}. */
export function errorData(error: unknown): ErrorData {
  if (KvasirError.isInstance(error)) {
    return {
      name: error.name,
      code: error.code,
      message: error.message,
      ...(error.details ? { details: { ...error.details } } : {}),
    };
  }
  if (error instanceof Error) return { name: error.name, message: error.message };
  return { name: 'Error', message: String(error) };
}

/**
 * The page's error for what the worker reported: a `WebEngineError` keeps its code, the engine's
 * refusal of a request field (`INVALID_REQUEST` naming it in `details.param`, such as a schema
 * XGrammar cannot compile) is `INVALID_REQUEST` with the same details, another typed error of the
 * engine becomes `ENGINE` with its code in `details.engineCode`, an abort an `AbortError`.
 */
export function fromErrorData(data: ErrorData): Error {
  if (data.name === 'AbortError') return new DOMException(data.message, 'AbortError');
  if (data.name === 'WebEngineError' && data.code) {
    return new WebEngineError(data.code as WebEngineErrorCode, data.message, {
      ...(data.details ? { details: { ...data.details } } : {}),
    });
  }
  if (data.code === 'INVALID_REQUEST' && typeof data.details?.param === 'string') {
    return new WebEngineError('INVALID_REQUEST', data.message, {
      details: { ...data.details, engineError: data.name },
    });
  }
  return new WebEngineError('ENGINE', data.message, {
    details: { ...data.details, engineCode: data.code, engineError: data.name },
  });
}
