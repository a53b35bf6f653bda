import { describeError } from '@kvasir/engine';
import { KvasirError } from '@kvasir/errors';

/** Stable codes of the app's own errors. */
export type KvasirAppErrorCode =
  | 'INVALID_CONFIG'
  | 'POLICY_LOAD'
  /** A user's plug-in threw, or overran the time budget of a plug-in call, while serving. */
  | 'PLUGIN_FAILED'
  | 'MODEL_LOAD'
  | 'OUT_OF_MEMORY'
  | 'ENGINE_STOPPED'
  | 'SWAP_LOST'
  /** `serve` cannot bind its `--host`/`--port` (in use, not this machine's, not permitted). */
  | 'LISTEN_FAILED'
  /** An offload tier cannot be opened at start-up (a disk directory that cannot be used). */
  | 'OFFLOAD_UNAVAILABLE';

/** An error of the `kvasir` app (configuration, policy loading, engine life cycle). */
export class KvasirAppError extends KvasirError<KvasirAppErrorCode> {}

/**
 * The line a user sees for an error that ends a command: a typed error's message and code; for
 * anything else its name and message, never its stack (`KVASIR_DEBUG=1` adds it).
 */
export function userMessage(error: unknown): string {
  const stack = process.env.KVASIR_DEBUG && error instanceof Error ? `\n${error.stack}` : '';
  if (KvasirError.isInstance(error)) return `${error.message} [${error.code}]${stack}`;
  return `unexpected ${describeError(error)} (KVASIR_DEBUG=1 prints where)${stack}`;
}
