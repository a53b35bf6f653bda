// The token masks of a step's constrained rows, computed beside its forward pass where it can.
import type { TokenBitmask } from '@kvasir/model';
import type { BatchPlan } from '@kvasir/scheduler';
import type { LiveRequest } from './live-request.js';

/**
 * A task after the current one (and every microtask queued meanwhile): by then a forward pass
 * started before it has dispatched its device work and is waiting for it.
 */
function nextTask(): Promise<void> {
  return new Promise((resolve) => {
    const { port1, port2 } = new MessageChannel();
    // A Web API port (Node's too): `onmessage` starts it, `close` lets the process exit.
    (port1 as unknown as { onmessage: (() => void) | null }).onmessage = () => {
      port1.close();
      resolve();
    };
    port2.postMessage(null);
  });
}

/**
 * Starts computing the token masks of a plan's constrained sample rows; undefined when it has
 * none (unconstrained steps pay nothing). Called as the forward pass starts and awaited after
 * it: the matchers hold every token sampled before this step (a row's mask depends on its
 * last token, so no mask of a step can be known before the step before it is sampled), so the
 * masks are those of this step's rows. With `overlap` (a forward pass that waits for a GPU),
 * they are computed in the next task, when the forward pass has dispatched its work and this
 * thread is idle until the device is done; without it, at once (the forward pass holds this
 * thread, and nothing can run beside it). A row whose mask failed gets the error; one whose
 * request ended meanwhile gets none.
 */
export function prepareMasks(
  plan: BatchPlan,
  live: ReadonlyMap<string, LiveRequest>,
  overlap = false,
): Promise<(TokenBitmask | Error | undefined)[]> | undefined {
  let pending: Promise<TokenBitmask | Error | undefined>[] | undefined;
  let start: Promise<void> | undefined;
  const n = plan.logitsIndices.length;
  for (let i = 0; i < n; i++) {
    const requestId = plan.rows[plan.sampleRows[i]!]!.requestId;
    const index = plan.sampleIndices[i]!;
    if (!live.get(requestId)?.isConstrained(index)) continue;
    pending ??= Array.from({ length: n }, () => Promise.resolve(undefined));
    if (overlap) start ??= nextTask();
    const mask = start
      ? start.then(() => live.get(requestId)?.nextTokenMask(index))
      : live.get(requestId)!.nextTokenMask(index)!;
    pending[i] = mask.catch((error: unknown) =>
      error instanceof Error ? error : new Error(String(error)),
    );
  }
  return pending && Promise.all(pending);
}
