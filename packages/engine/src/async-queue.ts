/**
 * A single-consumer queue exposed as an async iterator: the engine loop pushes events, an HTTP
 * handler consumes them. Ending or failing wakes the consumer. It does not bound itself: the
 * producer reads {@link size} (events pushed and not yet consumed) and {@link discard}s a
 * queue whose consumer stopped reading.
 */
export class AsyncQueue<T> implements AsyncIterableIterator<T> {
  readonly #items: T[] = [];
  #head = 0;
  #waiter: ((r: IteratorResult<T>) => void) | undefined;
  #failWaiter: ((e: unknown) => void) | undefined;
  #ended = false;
  #error: unknown;
  #failed = false;

  /** Appends an item (ignored after `end`/`fail`). */
  push(item: T): void {
    if (this.#ended || this.#failed) return;
    if (this.#waiter) {
      const w = this.#waiter;
      this.#waiter = undefined;
      this.#failWaiter = undefined;
      w({ value: item, done: false });
      return;
    }
    this.#items.push(item);
  }

  /** Ends the stream once the queued items are consumed. */
  end(): void {
    if (this.#ended || this.#failed) return;
    this.#ended = true;
    if (this.#waiter) {
      const w = this.#waiter;
      this.#waiter = undefined;
      this.#failWaiter = undefined;
      w({ value: undefined, done: true });
    }
  }

  /** Fails the stream once the queued items are consumed. */
  fail(error: unknown): void {
    if (this.#ended || this.#failed) return;
    this.#failed = true;
    this.#error = error;
    if (this.#failWaiter) {
      const f = this.#failWaiter;
      this.#waiter = undefined;
      this.#failWaiter = undefined;
      f(error);
    }
  }

  /**
   * Fails the stream at once, dropping the items its consumer has not read: for a consumer that
   * stopped reading, whose backlog would otherwise stay in memory until it goes away.
   */
  discard(error: unknown): void {
    this.#items.length = 0;
    this.#head = 0;
    this.fail(error);
  }

  /** Items pushed and not yet consumed. */
  get size(): number {
    return this.#items.length - this.#head;
  }

  /** True once ended or failed. */
  get closed(): boolean {
    return this.#ended || this.#failed;
  }

  next(): Promise<IteratorResult<T>> {
    if (this.#head < this.#items.length) {
      const value = this.#items[this.#head++]!;
      if (this.#head > 1024 && this.#head * 2 > this.#items.length) {
        this.#items.splice(0, this.#head);
        this.#head = 0;
      }
      return Promise.resolve({ value, done: false });
    }
    if (this.#failed) return Promise.reject(this.#error);
    if (this.#ended) return Promise.resolve({ value: undefined, done: true });
    return new Promise((resolve, reject) => {
      this.#waiter = resolve;
      this.#failWaiter = reject;
    });
  }

  return(): Promise<IteratorResult<T>> {
    this.end();
    this.#items.length = 0;
    this.#head = 0;
    return Promise.resolve({ value: undefined, done: true });
  }

  [Symbol.asyncIterator](): AsyncIterableIterator<T> {
    return this;
  }
}
