import type { Replica } from './replica.js';

/** Options of {@link HealthChecker}. */
export interface HealthCheckerOptions {
  /** A health check slower than this fails. */
  readonly timeoutMs: number;
  /** Failed checks in a row (timeouts, non-200) before a replica is taken out. */
  readonly unhealthyAfter: number;
  /** A replica that was out passed its check: it may have restarted with an empty cache. */
  readonly onBack: (replica: Replica) => void;
  readonly log: (line: string) => void;
}

/**
 * Keeps each replica's `healthy` and `down` flags from its `GET /health`. Until its first
 * answer a replica is out; then only a dead one (nothing listens) or one failing
 * `unhealthyAfter` checks in a row: a replica busy with a long step answers late, and is not
 * dead. One check per replica at a time.
 */
export class HealthChecker {
  readonly #replicas: readonly Replica[];
  readonly #options: HealthCheckerOptions;
  #timer: NodeJS.Timeout | undefined;
  #stopped = false;

  constructor(replicas: readonly Replica[], options: HealthCheckerOptions) {
    this.#replicas = replicas;
    this.#options = options;
  }

  /** Checks every replica now, then every `intervalMs` (the timer does not hold the process). */
  async start(intervalMs: number): Promise<void> {
    await this.check();
    if (this.#stopped) return;
    this.#timer = setInterval(() => void this.check(), intervalMs);
    this.#timer.unref();
  }

  /** One round of checks; a replica whose last check is still in flight is skipped. */
  async check(): Promise<void> {
    const { timeoutMs, unhealthyAfter, log } = this.#options;
    await Promise.all(
      this.#replicas.map(async (r) => {
        if (r.probing) return;
        r.probing = true;
        const result = await r.probe(timeoutMs);
        r.probing = false;
        if (this.#stopped) return;
        r.consecutiveFailures = result === 'ok' ? 0 : r.consecutiveFailures + 1;
        const ok =
          result === 'ok' ||
          (r.checked && result === 'failed' && r.consecutiveFailures < unhealthyAfter && r.healthy);
        if (ok && !r.healthy && r.checked) {
          log(`replica ${r.url} is back`);
          this.#options.onBack(r);
        } else if (!ok && r.healthy) {
          log(
            `replica ${r.url} failed its health check (${result === 'down' ? 'not listening' : `${r.consecutiveFailures} in a row`}); not routing to it`,
          );
        }
        r.healthy = ok;
        r.down = result === 'down';
        r.checked = true;
      }),
    );
  }

  /** No more checks; answers still in flight are ignored. */
  stop(): void {
    this.#stopped = true;
    clearInterval(this.#timer);
  }
}
