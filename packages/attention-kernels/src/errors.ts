import { KvasirError } from '@kvasir/errors';

/** Stable reasons an {@link AttentionKernelError} is thrown. */
export type AttentionKernelErrorCode =
  /** An input's length or shape disagrees with the configuration or another input. */
  | 'SHAPE_MISMATCH'
  /** A block id (block table, copy pair) is outside the cache buffer. */
  | 'BLOCK_OUT_OF_RANGE'
  /** A slot in a slot mapping is outside the cache buffer (and not -1). */
  | 'SLOT_OUT_OF_RANGE'
  /** A context length needs more blocks than the block table row holds. */
  | 'CONTEXT_TOO_LONG'
  /** No kernel exists for this head dim. */
  | 'UNSUPPORTED_HEAD_DIM'
  /** The KV element format is unknown or cannot be used here. */
  | 'UNSUPPORTED_FORMAT'
  /** The configuration does not fit the device (buffer binding size, workgroup limits). */
  | 'DEVICE_LIMIT'
  /** Any other bad argument (non-integer count, negative value, bad option). */
  | 'INVALID_ARGUMENT';

/**
 * The error every `@kvasir/attention-kernels` function throws for bad input, before anything
 * is dispatched. Match on `code`, never on `message`; `details` names the offending values.
 */
export class AttentionKernelError extends KvasirError<AttentionKernelErrorCode> {}
