import { KvasirAppError } from './errors.js';

const FREE_PORT_HINT = '--port 0 picks a free port';

/** What to tell a user for each way `listen()` fails (Node's error codes). */
const REASONS: Readonly<Record<string, (host: string, port: number) => string>> = {
  EADDRINUSE: (_host, port) =>
    `port ${port} is already in use; stop what listens there, choose another --port, or ${FREE_PORT_HINT}`,
  EACCES: (_host, port) =>
    `permission denied for port ${port} (ports below 1024 need privileges); choose another --port, or ${FREE_PORT_HINT}`,
  EADDRNOTAVAIL: (host) =>
    `${host} is not an address of this machine; use one of its interfaces with --host (127.0.0.1, 0.0.0.0 for all)`,
  ENOTFOUND: (host) =>
    `--host ${host} does not resolve to an address; use an interface address (127.0.0.1, 0.0.0.0 for all)`,
  EAI_AGAIN: (host) =>
    `--host ${host} could not be resolved now (DNS unavailable); use an interface address such as 127.0.0.1`,
  EAFNOSUPPORT: (host) => `this machine does not support the address family of --host ${host}`,
};

/**
 * The typed error of a server that could not bind `host:port`: names the cause and the flag to
 * change instead of Node's `listen EADDRINUSE` and its stack.
 */
export function listenError(error: unknown, host: string, port: number): unknown {
  const code = (error as NodeJS.ErrnoException | undefined)?.code;
  const reason = code === undefined ? undefined : REASONS[code];
  if (reason === undefined) {
    if (!(error instanceof Error)) return error;
    return new KvasirAppError(
      'LISTEN_FAILED',
      `cannot listen on ${host}:${port}: ${error.message}; check --host and --port (${FREE_PORT_HINT})`,
      { cause: error },
    );
  }
  return new KvasirAppError(
    'LISTEN_FAILED',
    `cannot listen on ${host}:${port}: ${reason(host, port)}`,
    {
      cause: error,
      details: { host, port, errno: code },
    },
  );
}
