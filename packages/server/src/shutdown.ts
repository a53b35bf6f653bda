import type { KvasirServer } from './server.js';

/**
 * Closes `server` gracefully on SIGTERM or SIGINT (a second signal exits at once). Returns a
 * function that removes the handlers.
 *
 * @example
 * ```ts
 * handleShutdownSignals(server, { deadlineMs: 30_000, onClosed: () => engine.dispose() });
 * ```
 */
export function handleShutdownSignals(
  server: KvasirServer,
  options: { deadlineMs?: number; onClosed?: () => void | Promise<void> } = {},
): () => void {
  let shuttingDown = false;
  const onSignal = (signal: NodeJS.Signals) => {
    if (shuttingDown) {
      process.exit(130);
    }
    shuttingDown = true;
    process.stderr.write(`\n[kvasir] ${signal}: draining in-flight requests...\n`);
    void server
      .close(options.deadlineMs)
      .then(() => options.onClosed?.())
      .then(
        () => process.exit(0),
        (error: unknown) => {
          process.stderr.write(`[kvasir] shutdown failed: ${String(error)}\n`);
          process.exit(1);
        },
      );
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);
  return () => {
    process.off('SIGTERM', onSignal);
    process.off('SIGINT', onSignal);
  };
}
