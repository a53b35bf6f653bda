import { AttentionKernelError } from '../errors.js';

/**
 * The code of the {@link AttentionKernelError} that `f` throws or rejects with, or undefined
 * when it succeeds; any other error propagates.
 */
export async function attentionErrorCode(f: () => unknown): Promise<string | undefined> {
  try {
    await f();
  } catch (e) {
    if (AttentionKernelError.isInstance(e)) return e.code;
    throw e;
  }
  return undefined;
}
