import { SchedulerError } from '@kvasir/scheduler';

/**
 * Failures of users' plug-ins since start, by `kind:name` (`eviction:mru`,
 * `kv-compression:first-and-last`): hooks that threw, returned what their contract forbids, or
 * overran their time budget. The first failure of each plug-in is logged; the rest are only
 * counted, for `/metrics`, so a plug-in that fails on every call cannot flood the log.
 */
export class PluginFailures {
  readonly #counts = new Map<string, number>();
  readonly #log: (line: string) => void;

  constructor(log: (line: string) => void) {
    this.#log = log;
  }

  /** Counts `count` failures of `plugin` (`kind:name`); logs its first. */
  record(plugin: string, message: string, count = 1): void {
    const seen = this.#counts.get(plugin) ?? 0;
    this.#counts.set(plugin, seen + count);
    if (seen === 0) {
      this.#log(`plug-in ${plugin} failed: ${message} (further failures are counted in /metrics)`);
    }
  }

  /** The counts so far, by `kind:name`. */
  counts(): Readonly<Record<string, number>> {
    return Object.fromEntries(this.#counts);
  }
}

/**
 * The compression policy and the requests of a `Scheduler.update` that failed because a KV
 * compression plug-in did (`INVALID_POLICY` naming `requestIds`); undefined for any other error.
 */
export function compressionPolicyFailure(
  error: unknown,
): { readonly plugin: string; readonly requestIds: readonly string[] } | undefined {
  if (!SchedulerError.isInstance(error) || error.code !== 'INVALID_POLICY') return undefined;
  const ids = error.details?.requestIds;
  if (!Array.isArray(ids)) return undefined;
  return {
    plugin: `kv-compression:${String(error.details?.policy)}`,
    requestIds: ids.map(String),
  };
}
