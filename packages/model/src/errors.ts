import { KvasirError } from '@kvasir/errors';

/**
 * Stable codes of {@link ModelError}. Match on these, never on the message.
 *
 * - `INVALID_CONFIG`: a `config.json` / GGUF metadata value is missing, of the wrong type or out of range.
 * - `UNSUPPORTED_ARCHITECTURE`: the checkpoint is not a Llama-family model this package runs.
 * - `MALFORMED_FILE`: a file's structure is wrong (bad magic, bad header length, bad JSON, overlapping data).
 * - `TRUNCATED_FILE`: a header or tensor extends past the end of its file.
 * - `MISSING_TENSOR`: a tensor the config requires is absent.
 * - `SHAPE_MISMATCH`: a tensor's shape or byte length disagrees with the config or its dtype.
 * - `UNSUPPORTED_DTYPE`: a tensor's element type is not F32/F16/BF16/Q8_0.
 * - `UNSUPPORTED_TOKENIZER`: the tokenizer kind cannot be loaded (e.g. a GGUF tokenizer model we do not implement).
 * - `TOKENIZER`: encoding/decoding failed or the tokenizer files are invalid.
 * - `CHAT_TEMPLATE`: no chat template, or the template failed to render.
 * - `INVALID_ARGUMENT`: a caller passed a bad value (sampling parameters, head counts, paths).
 * - `IO`: a file could not be read or written.
 * - `INVALID_PLAN`: a batch plan handed to the forward pass is inconsistent.
 * - `BACKEND`: the execution backend (GPU or CPU) failed.
 * - `INVALID_CONSTRAINT`: an output constraint (JSON schema, grammar, regex) cannot be compiled.
 */
export type ModelErrorCode =
  | 'INVALID_CONFIG'
  | 'UNSUPPORTED_ARCHITECTURE'
  | 'MALFORMED_FILE'
  | 'TRUNCATED_FILE'
  | 'MISSING_TENSOR'
  | 'SHAPE_MISMATCH'
  | 'UNSUPPORTED_DTYPE'
  | 'UNSUPPORTED_TOKENIZER'
  | 'TOKENIZER'
  | 'CHAT_TEMPLATE'
  | 'INVALID_ARGUMENT'
  | 'IO'
  | 'INVALID_PLAN'
  | 'BACKEND'
  | 'INVALID_CONSTRAINT';

/**
 * The error every `@kvasir/model` function throws. `code` is stable; `details` carries the file,
 * tensor and sizes involved where known.
 *
 * @example
 * ```ts
 * try { await openCheckpoint(path); } catch (e) {
 *   if (ModelError.isInstance(e) && e.code === 'TRUNCATED_FILE') console.error(e.details?.tensor);
 * }
 * ```
 */
export class ModelError extends KvasirError<ModelErrorCode> {}

/**
 * The `IO` error of a file operation on `path` that failed with `cause`: `"<what> <path>: <cause
 * message>"`, e.g. `fileIoError('cannot open', path, e)`.
 */
export function fileIoError(what: string, path: string, cause: unknown): ModelError {
  return new ModelError('IO', `${what} ${path}: ${(cause as Error).message}`, {
    cause,
    details: { file: path },
  });
}
