import { KvasirError } from '@kvasir/errors';

/** Stable reasons @kvasir/router refuses something. */
export type RouterErrorCode =
  /** An option is missing or out of range (no replica, a malformed URL or endpoint, ...). */
  | 'INVALID_OPTIONS'
  /** A value given as a routing policy is not one (see `validateRoutingPolicy`). */
  | 'INVALID_POLICY'
  /** A routing policy threw or chose a replica it was not offered. */
  | 'POLICY_FAILED'
  /** A KV event batch does not follow vLLM's schema. */
  | 'INVALID_EVENT'
  /** The request body is not JSON, or too large. */
  | 'INVALID_REQUEST'
  /** No healthy replica could take the request (all down, or all failed before it started). */
  | 'NO_REPLICA';

/** Thrown by @kvasir/router for misuse, malformed events and requests no replica can take. */
export class RouterError extends KvasirError<RouterErrorCode> {}
