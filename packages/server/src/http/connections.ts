import { readFileSync } from 'node:fs';
import type { Server } from 'node:http';
import type { Socket } from 'node:net';

/** File descriptors kept for everything but client sockets (model files, stores, logs). */
const RESERVED_FDS = 128;
/** The default connection cap where the open-file limit allows more. */
const DEFAULT_MAX_CONNECTIONS = 4096;

/**
 * The process's soft limit on open files (`ulimit -n`), read from `/proc/self/limits`;
 * undefined where that file does not exist (not Linux) or says `unlimited`.
 */
export function openFileLimit(limits = '/proc/self/limits'): number | undefined {
  try {
    const line = readFileSync(limits, 'utf8')
      .split('\n')
      .find((l) => l.startsWith('Max open files'));
    const soft = Number(line?.slice('Max open files'.length).trim().split(/\s+/)[0]);
    return Number.isFinite(soft) && soft > 0 ? soft : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The default connection cap: 4,096, or the open-file limit less what the process needs for
 * itself (128) when that is lower, so that an accept never fails for want of a descriptor.
 */
export function defaultMaxConnections(fileLimit = openFileLimit()): number {
  if (fileLimit === undefined) return DEFAULT_MAX_CONNECTIONS;
  return Math.max(16, Math.min(DEFAULT_MAX_CONNECTIONS, fileLimit - RESERVED_FDS));
}

/** Writes a complete HTTP answer and closes the socket, even if the peer never closes its side. */
export function answerAndClose(socket: Socket, status: string, body: string, headers = ''): void {
  socket.end(
    `HTTP/1.1 ${status}\r\ncontent-type: application/json; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(body)}\r\n${headers}connection: close\r\n\r\n${body}`,
  );
  // end() only half-closes: a peer that never reads or closes would hold the socket forever.
  setTimeout(() => socket.destroy(), 1000).unref();
}

const BUSY_BODY = JSON.stringify({
  error: {
    message: 'the server has too many open connections; retry later',
    type: 'service_unavailable',
    param: null,
    code: 'too_many_connections',
  },
});

/**
 * Caps the connections `server` keeps open at `maxConnections`. A connection beyond the cap
 * takes the place of the oldest idle one (no request in progress: a silent socket, a kept-alive
 * one), so idle sockets can never lock out `/health`; when every connection is busy, the new one
 * is answered 503 at once and closed. Returns the number of connections open, for tests.
 */
export function capConnections(
  server: Server,
  maxConnections: number,
  onRefused: () => void,
): () => number {
  /** Open sockets, oldest first, with the number of requests in progress on each. */
  const open = new Map<Socket, number>();
  server.on('connection', (socket: Socket) => {
    if (open.size >= maxConnections) {
      let idle: Socket | undefined;
      for (const [s, busy] of open) {
        if (busy === 0) {
          idle = s;
          break;
        }
      }
      if (idle) {
        open.delete(idle);
        idle.destroy();
      } else {
        onRefused();
        socket.on('error', () => {});
        answerAndClose(socket, '503 Service Unavailable', BUSY_BODY, 'retry-after: 1\r\n');
        return;
      }
    }
    open.set(socket, 0);
    socket.once('close', () => open.delete(socket));
  });
  server.on('request', (request, response) => {
    const socket = request.socket;
    const busy = open.get(socket);
    if (busy === undefined) return;
    open.set(socket, busy + 1);
    response.once('close', () => {
      const now = open.get(socket);
      if (now !== undefined) open.set(socket, Math.max(0, now - 1));
    });
  });
  return () => open.size;
}
