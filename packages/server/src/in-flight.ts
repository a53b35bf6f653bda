import type { ServerResponse } from 'node:http';
import { EngineError } from './errors.js';

/** One generation being served: its cancellation, and the call that ends its tracking. */
export interface InFlightRequest {
  /** Aborted on timeout, when the client goes away, at shutdown, or by the handler. */
  readonly controller: AbortController;
  /** Stops tracking the request (call once, when its response is done). */
  end(): void;
}

/**
 * The generations a server is running, and their lifecycle: each gets a deadline and is
 * aborted when its client disconnects (so its KV blocks come back at once); {@link drain}
 * refuses new work, waits for the running ones up to a deadline and aborts the rest.
 */
export class InFlightRequests {
  readonly #timeoutMs: number;
  readonly #entries = new Set<{ controller: AbortController; done: Promise<void> }>();
  #draining = false;

  /** @param timeoutMs deadline of one generation (then it is aborted with `TIMEOUT`). */
  constructor(timeoutMs: number) {
    this.#timeoutMs = timeoutMs;
  }

  /** Generations running now. */
  get size(): number {
    return this.#entries.size;
  }

  /** True once {@link drain} has begun. */
  get draining(): boolean {
    return this.#draining;
  }

  /** Starts tracking the generation answered on `raw`. */
  begin(raw: ServerResponse): InFlightRequest {
    const controller = new AbortController();
    let settle!: () => void;
    const entry = { controller, done: new Promise<void>((resolve) => (settle = resolve)) };
    this.#entries.add(entry);
    const timer = setTimeout(
      () =>
        controller.abort(new EngineError('TIMEOUT', `generation exceeded ${this.#timeoutMs} ms`)),
      this.#timeoutMs,
    );
    timer.unref();
    const onClose = () => {
      if (!raw.writableFinished) controller.abort(new Error('client disconnected'));
    };
    raw.on('close', onClose);
    return {
      controller,
      end: () => {
        clearTimeout(timer);
        raw.off('close', onClose);
        this.#entries.delete(entry);
        settle();
      },
    };
  }

  /**
   * Refuses new work from now on, lets running generations finish until `deadlineMs`, then
   * aborts the rest with `DRAINING` and waits for their handlers to end.
   */
  async drain(deadlineMs: number): Promise<void> {
    this.#draining = true;
    const all = () => Promise.all([...this.#entries].map((e) => e.done));
    let timer: NodeJS.Timeout | undefined;
    const expired = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, deadlineMs);
    });
    await Promise.race([all(), expired]);
    clearTimeout(timer);
    for (const entry of this.#entries) {
      entry.controller.abort(
        new EngineError('DRAINING', 'server shut down before the request finished'),
      );
    }
    await all();
  }
}
