import { KvasirError } from '@kvasir/errors';

/** Stable reasons a `RehearsalError` is thrown. */
export type RehearsalErrorCode =
  | 'COMMAND_FAILED'
  | 'COMMAND_TIMEOUT'
  | 'REGISTRY_UNAVAILABLE'
  | 'BAD_WORKSPACE'
  | 'BAD_EXAMPLE'
  | 'BAD_PUBLISHED_SHAPE';

/** Thrown by the release rehearsal; `details` names the package, command or file at fault. */
export class RehearsalError extends KvasirError<RehearsalErrorCode> {}
