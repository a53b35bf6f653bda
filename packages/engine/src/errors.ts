import { KvasirError } from '@kvasir/errors';

/** Stable codes of the engine's own errors. */
export type KvasirEngineErrorCode =
  /** A setting the engine cannot run with; the message names the flag or field. */
  | 'INVALID_CONFIG'
  /** A plug-in module that cannot be imported, exports nothing usable or breaks its contract. */
  | 'POLICY_LOAD'
  /** A user's plug-in threw, or overran the time budget of a plug-in call, while serving. */
  | 'PLUGIN_FAILED'
  | 'MODEL_LOAD'
  | 'OUT_OF_MEMORY'
  | 'ENGINE_STOPPED'
  /** A swapped-out block came back with the wrong size. */
  | 'SWAP_LOST';

/** An error of the engine (configuration, plug-ins, memory plan, engine life cycle). */
export class KvasirEngineError extends KvasirError<KvasirEngineErrorCode> {}

/** Codes after which the device can run nothing more: the only step failures that are fatal. */
const FATAL_CODES: ReadonlySet<string> = new Set(['DEVICE_LOST', 'DESTROYED']);

/** True when `error` (or an error it was caused by) says the device is gone. */
export function isDeviceLost(error: unknown): boolean {
  for (let e = error, depth = 0; e !== undefined && depth < 8; depth++) {
    if (KvasirError.isInstance(e) && FATAL_CODES.has(e.code)) return true;
    e = e instanceof Error ? e.cause : undefined;
  }
  return false;
}

/** `Name: message` of an error, for one-line logs (no stack). */
export const describeError = (error: unknown): string =>
  error instanceof Error ? `${error.name}: ${error.message}` : String(error);
