/** How a queued transfer ended. */
export type TransferOutcome<T> =
  | { readonly status: 'done'; readonly value: T }
  /** Its deadline passed while it waited; it never ran. */
  | { readonly status: 'expired' }
  /** The queue was full; it never ran. */
  | { readonly status: 'rejected' }
  /** It ran and threw; the queue carries on. */
  | { readonly status: 'failed'; readonly error: unknown };

interface Job {
  readonly run: () => Promise<unknown>;
  readonly deadlineAt: number;
  readonly resolve: (o: TransferOutcome<unknown>) => void;
}

/**
 * A bounded queue of asynchronous transfers with a concurrency limit and per-job deadlines.
 * Urgent jobs (fetches an engine waits for) run before background ones (promotions,
 * demotions). A job never rejects its submitter and a failing job never stops the queue: a
 * backend error must not silently disable a tier for the life of the process.
 */
export class TransferQueue {
  private readonly urgent: Job[] = [];
  private readonly background: Job[] = [];
  private running = 0;
  private idleWaiters: (() => void)[] = [];

  constructor(
    private readonly maxQueued: number,
    private readonly maxConcurrent: number,
    private readonly now: () => number,
  ) {}

  /** Jobs waiting to run. */
  get queued(): number {
    return this.urgent.length + this.background.length;
  }

  /** Jobs running now. */
  get active(): number {
    return this.running;
  }

  submit<T>(
    run: () => Promise<T>,
    deadlineAt: number,
    urgent: boolean,
  ): Promise<TransferOutcome<T>> {
    if (this.queued >= this.maxQueued) return Promise.resolve({ status: 'rejected' });
    // Background moves may fill at most half the queue, so they never crowd out fetches.
    if (!urgent && this.background.length >= Math.ceil(this.maxQueued / 2)) {
      return Promise.resolve({ status: 'rejected' });
    }
    return new Promise<TransferOutcome<T>>((resolve) => {
      (urgent ? this.urgent : this.background).push({
        run,
        deadlineAt,
        resolve: resolve as (o: TransferOutcome<unknown>) => void,
      });
      this.pump();
    });
  }

  /** Resolves when nothing is queued or running. */
  drain(): Promise<void> {
    if (this.queued === 0 && this.running === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  private pump(): void {
    while (this.running < this.maxConcurrent) {
      const job = this.urgent.shift() ?? this.background.shift();
      if (job === undefined) break;
      if (this.now() >= job.deadlineAt) {
        job.resolve({ status: 'expired' });
        continue;
      }
      this.running++;
      let p: Promise<unknown>;
      try {
        p = job.run();
      } catch (error) {
        p = Promise.reject(error);
      }
      p.then(
        (value) => job.resolve({ status: 'done', value }),
        (error: unknown) => job.resolve({ status: 'failed', error }),
      ).finally(() => {
        this.running--;
        this.pump();
      });
    }
    if (this.queued === 0 && this.running === 0 && this.idleWaiters.length > 0) {
      const waiters = this.idleWaiters;
      this.idleWaiters = [];
      for (const w of waiters) w();
    }
  }
}
