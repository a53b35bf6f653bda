/** What a {@link StepLoop} drives: the engine's steps and what runs between them. */
export interface StepLoopBody {
  /** Whether work waits for {@link betweenSteps} (connectors' imports). */
  hasPendingWork(): boolean;
  /** Work that changes the allocator, awaited before a step while there is some. */
  betweenSteps(): Promise<void>;
  /** Whether the scheduler has unfinished requests. */
  hasRequests(): boolean;
  /** Runs one step; false when it had nothing to run. */
  step(): Promise<boolean>;
  /** Called after each step (one KV event batch per step). */
  afterStep(): void;
}

/**
 * Lets queued events run before the next step. Node's `setImmediate` where there is one; a
 * `MessageChannel` message elsewhere (browsers and workers), because nested `setTimeout(0)`
 * waits at least 4 ms there, which would cap a fast model's decode rate.
 */
const yieldToEventLoop: () => Promise<void> =
  typeof setImmediate === 'function'
    ? () => new Promise<void>((resolve) => setImmediate(resolve))
    : () =>
        new Promise<void>((resolve) => {
          // The browser's MessagePort (Node's types describe worker_threads' one).
          const { port1, port2 } = new MessageChannel() as unknown as {
            port1: { onmessage: (() => void) | null; close(): void };
            port2: { postMessage(message: unknown): void };
          };
          port1.onmessage = () => {
            port1.close();
            resolve();
          };
          port2.postMessage(undefined);
        });
/** Longest sleep of the loop between retries of a step that had nothing to run. */
const MAX_RETRY_MS = 1000;

/**
 * When the engine's steps run: back to back while they work, yielding to the event loop between
 * them so that HTTP traffic, aborts and new requests are handled while a long
 * generation runs; asleep when there is nothing to do, until {@link wake}, so an idle engine
 * costs no CPU.
 */
export class StepLoop {
  readonly #body: StepLoopBody;
  readonly #onFailure: (error: unknown) => void;
  #wake: (() => void) | undefined;
  #running: Promise<void> | undefined;
  #stopping = false;
  #acceptedConnections: (() => number) | undefined;

  /** `onFailure` gets what a step threw that ends the loop (a lost device). */
  constructor(body: StepLoopBody, onFailure: (error: unknown) => void) {
    this.#body = body;
    this.#onFailure = onFailure;
  }

  /** Starts the loop unless it runs already. */
  start(): void {
    if (this.#running) return;
    this.#running = this.#run().catch(this.#onFailure);
  }

  /** Wakes the loop if it sleeps: something changed that a step may act on. */
  wake(): void {
    this.#wake?.();
  }

  /** Ends the loop after the step in flight, if any. */
  async stop(): Promise<void> {
    this.#stopping = true;
    this.#wake?.();
    await this.#running;
  }

  async #run(): Promise<void> {
    const body = this.#body;
    let retryMs = 1;
    while (!this.#stopping) {
      // Connector work that changes the allocator runs here, never while a plan is in flight.
      if (body.hasPendingWork()) await body.betweenSteps();
      if (!body.hasRequests() && !body.hasPendingWork()) {
        await this.#sleep();
        continue;
      }
      const started = performance.now();
      const worked = await body.step();
      body.afterStep();
      // Let HTTP handlers, aborts and new requests in between steps.
      if (worked) {
        retryMs = 1;
        await this.#letConnectionsIn(performance.now() - started);
        continue;
      }
      // Nothing could run: everything waits on blocks held elsewhere. A new request, an abort
      // or a connector wakes the loop; the retry, backing off to once a second, covers what
      // changes without telling it, at no cost to an engine that waits for long.
      await this.#sleep(retryMs);
      retryMs = Math.min(2 * retryMs, MAX_RETRY_MS);
    }
  }

  /**
   * Tells the loop how many connections the host has accepted so far. Node accepts one
   * connection per turn of the event loop, and the loop turns it once between steps: under a
   * flood of connections the kernel's accept queue overflows and clients hang. With this, the
   * loop lets the event loop turn again while connections keep coming, for at most twice as long
   * as the step took: a flood is accepted and answered (429 when the queue is full) at the cost
   * of a third of the engine's time while it lasts.
   */
  watchAcceptedConnections(accepted: () => number): void {
    this.#acceptedConnections = accepted;
  }

  /** Yields to the event loop after a step of `stepMs`, longer while connections come in. */
  async #letConnectionsIn(stepMs: number): Promise<void> {
    const accepted = this.#acceptedConnections;
    let before = accepted?.();
    await yieldToEventLoop();
    if (!accepted) return;
    const until = performance.now() + Math.max(1, 2 * stepMs);
    while (accepted() !== before && performance.now() < until) {
      before = accepted();
      await yieldToEventLoop();
    }
  }

  /** Sleeps until {@link wake} is called, or `ms` milliseconds have passed when given. */
  #sleep(ms?: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const timer = ms === undefined ? undefined : setTimeout(() => this.#wake?.(), ms);
      this.#wake = () => {
        clearTimeout(timer);
        this.#wake = undefined;
        resolve();
      };
    });
  }
}
