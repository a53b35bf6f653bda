import { KvasirEngineError } from '../errors.js';

/** Default time budget of one call into a user's plug-in, in milliseconds. */
export const DEFAULT_PLUGIN_BUDGET_MS = 250;

/**
 * Times every call into one user plug-in (a module loaded with `loadPlugin`) against a budget.
 * A call that overruns it disables the plug-in: that call's result is thrown away and it and
 * every later call throw `PLUGIN_FAILED`, so the caller falls back to its built-in policy (an
 * eviction policy) or fails the requests that rely on the plug-in (a KV compression policy).
 *
 * What this guarantees: a slow plug-in stalls the engine (and the event loop, so `/health` and
 * shutdown too) once, for one call, never again. What it cannot: plug-ins run synchronously on
 * the engine's thread, and JavaScript cannot preempt a synchronous call, so a call that never
 * returns (an endless loop) still hangs the process; run such code in a worker of your own.
 */
export class PluginGuard {
  readonly label: string;
  readonly budgetMs: number;
  #disabled: string | undefined;

  /** `label` names the plug-in in errors: `eviction policy mru`. */
  constructor(label: string, budgetMs = DEFAULT_PLUGIN_BUDGET_MS) {
    this.label = label;
    this.budgetMs = budgetMs;
  }

  /** Why the plug-in was disabled; undefined while it is in use. */
  get disabled(): string | undefined {
    return this.#disabled;
  }

  /**
   * Runs `hook` of the plug-in. A throw passes through as is.
   * @throws KvasirEngineError `PLUGIN_FAILED` when the plug-in is disabled, or this call overran
   *   the budget (which disables it).
   */
  call<R>(hook: string, run: () => R): R {
    if (this.#disabled !== undefined) {
      throw new KvasirEngineError('PLUGIN_FAILED', `${this.label} is disabled: ${this.#disabled}`, {
        details: { plugin: this.label, hook },
      });
    }
    const start = performance.now();
    let result: R;
    try {
      result = run();
    } finally {
      const ms = performance.now() - start;
      if (ms > this.budgetMs) {
        this.#disabled = `${hook} took ${Math.round(ms)} ms, over the ${this.budgetMs} ms budget of a plug-in call`;
      }
    }
    if (this.#disabled !== undefined) {
      throw new KvasirEngineError('PLUGIN_FAILED', `${this.label} ${this.#disabled}; disabled`, {
        details: { plugin: this.label, hook },
      });
    }
    return result;
  }
}
