import { KvasirError } from '@kvasir/errors';

/** Stable reasons a quantizer call fails. */
export type QuantizerErrorCode =
  | 'UNKNOWN_FORMAT'
  | 'UNSUPPORTED_GRANULARITY'
  | 'BAD_SHAPE'
  | 'BAD_GROUP_SIZE'
  | 'BAD_SCALE'
  | 'LENGTH_MISMATCH'
  | 'EMPTY_INPUT'
  | 'UNSUPPORTED_GGML_TYPE';

/**
 * Thrown by every `@kvasir/quantizer` function on bad input, before any output is written.
 *
 * @example
 * ```ts
 * try { quantize(x, { format: 'int4', granularity: { kind: 'per-tensor', scale: 1 } }, shape); }
 * catch (e) { if (QuantizerError.isInstance(e) && e.code === 'UNSUPPORTED_GRANULARITY') ... }
 * ```
 */
export class QuantizerError extends KvasirError<QuantizerErrorCode> {}
