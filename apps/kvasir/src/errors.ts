import { KvasirError } from '@kvasir/errors';

/** Stable codes of the app's own errors. */
export type KvasirAppErrorCode =
  | 'INVALID_CONFIG'
  | 'POLICY_LOAD'
  | 'MODEL_LOAD'
  | 'OUT_OF_MEMORY'
  | 'ENGINE_STOPPED'
  | 'SWAP_LOST';

/** An error of the `kvasir` app (configuration, policy loading, engine life cycle). */
export class KvasirAppError extends KvasirError<KvasirAppErrorCode> {}
