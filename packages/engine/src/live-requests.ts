import type { BatchPlan, RequestOutput, Scheduler } from '@kvasir/scheduler';
import { EngineError } from '@kvasir/server/spec';
import { describeError } from './errors.js';
import type { LiveRequest } from './live-request.js';

/**
 * The engine's requests that have a client waiting, by id, and the ways one ends: with the
 * scheduler's output, aborted, or failed with a clean `INTERNAL` error while every other request
 * goes on. Each way frees the request's blocks in the scheduler and removes it here.
 */
export class LiveRequests extends Map<string, LiveRequest> {
  readonly #scheduler: Scheduler;
  readonly #log: (line: string) => void;
  /** Steps whose planning or running threw. */
  failedSteps = 0;
  /** Requests ended by a failure (a step's, their sampling's, their plug-in's). */
  failedRequests = 0;
  /** Streaming requests ended because their client stopped reading. */
  stalledStreams = 0;

  constructor(scheduler: Scheduler, log: (line: string) => void) {
    super();
    this.#scheduler = scheduler;
    this.#log = log;
  }

  /** Ends a request's stream: with the scheduler's output when it has one, else as aborted. */
  end(live: LiveRequest, output: RequestOutput | undefined): void {
    if (output) live.finish(output);
    else live.end('abort');
    this.delete(live.request.id);
  }

  /**
   * Ends a request its client aborted. Never throws (it runs in an abort listener, where a throw
   * would take the process down): a failure is logged and the request still ends.
   */
  abort(live: LiveRequest): void {
    const id = live.request.id;
    try {
      this.end(live, this.#scheduler.abort(id));
    } catch (error) {
      this.#log(`aborting request ${id} failed (${describeError(error)})`);
      this.delete(id);
      live.fail(new EngineError('INTERNAL', 'aborting the request failed', { cause: error }));
    }
  }

  /**
   * Ends the requests whose client stopped reading (more than `maxUnreadPerChoice` unread events
   * per choice): their output would pile up in memory while they held their blocks. The blocks
   * are sound, so they stay cached; the unread events are dropped.
   */
  dropStalled(maxUnreadPerChoice: number): void {
    for (const live of this.values()) {
      const unread = live.unread;
      if (unread <= maxUnreadPerChoice * live.request.n) continue;
      this.#scheduler.abort(live.request.id);
      this.delete(live.request.id);
      this.stalledStreams++;
      this.#log(`request ${live.request.id}: its client left ${unread} events unread; ended it`);
      live.drop(new EngineError('TIMEOUT', 'the client stopped reading the stream'));
    }
  }

  /**
   * Ends one request with an `INTERNAL` error: the scheduler frees its blocks (kept for prefix
   * reuse only when their content is sound), its stream throws.
   */
  fail(id: string, keepCached: boolean, message: string, cause?: unknown): void {
    this.#scheduler.abort(id, { keepCached });
    const live = this.get(id);
    if (!live || live.ended) return;
    this.failedRequests++;
    this.delete(id);
    live.fail(new EngineError('INTERNAL', message, { cause }));
  }

  /**
   * Ends every request of a step that threw: their blocks are freed without entering the prefix
   * cache (the step may have left them half written), their streams fail with a clean error,
   * and every other request goes on.
   */
  failStep(plan: BatchPlan, error: unknown): void {
    const ids = new Set<string>();
    for (const row of plan.rows) ids.add(row.requestId);
    for (const t of plan.swapOut) ids.add(t.requestId);
    for (const t of plan.swapIn) ids.add(t.requestId);
    this.failedSteps++;
    this.#log(
      `step ${plan.step} failed (${describeError(error)}); ending its ${ids.size} request(s): ${[...ids].join(', ')}`,
    );
    for (const id of ids) this.fail(id, false, 'the engine failed on this request', error);
  }

  /**
   * Ends every live request after planning step `step` threw: which requests the half-built plan
   * had touched is unknown, so none of their blocks is trusted or kept for prefix reuse.
   */
  failSchedule(step: number, error: unknown): void {
    this.failedSteps++;
    const ids = [...this.keys()];
    this.#log(
      `planning step ${step} failed (${describeError(error)}); ending ${ids.length} request(s): ${ids.join(', ')}`,
    );
    for (const id of ids) {
      try {
        this.fail(id, false, 'the engine could not plan a step for it', error);
      } catch (abortError) {
        this.#log(`ending request ${id} failed (${describeError(abortError)})`);
        this.get(id)?.fail(new EngineError('INTERNAL', 'the engine failed', { cause: error }));
        this.delete(id);
      }
    }
  }
}
