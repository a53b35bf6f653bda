import { connect, type Socket } from 'node:net';
import { describe, expect, it } from 'vitest';
import { startServer } from './harness.js';

describe('idle connections against kvasir serve (built CLI)', () => {
  it('400 silent sockets under ulimit -n 256 leave /health answering, and are closed', async () => {
    const server = await startServer(['--backend', 'cpu'], { openFileLimit: 256 });
    const { port, hostname } = new URL(server.url);
    const sockets: Socket[] = [];
    try {
      // More sockets than the process has file descriptors: without a cap below the limit,
      // accept() fails (EMFILE) and /health is never answered.
      for (let i = 0; i < 400; i++) {
        const socket = connect({ port: Number(port), host: hostname, allowHalfOpen: true });
        socket.on('error', () => {});
        socket.resume();
        sockets.push(socket);
      }
      await Promise.all(
        sockets.map(
          (s) =>
            new Promise((resolve) =>
              s.connecting ? s.once('connect', resolve).once('close', resolve) : resolve(undefined),
            ),
        ),
      );
      const started = Date.now();
      const health = await fetch(`${server.url}/health`, { signal: AbortSignal.timeout(10_000) });
      expect(health.status).toBe(200);
      expect(Date.now() - started).toBeLessThan(5000);
      // The server dropped the idle ones it could not keep (the cap is 256 - 128 here).
      const closed = sockets.filter((s) => s.destroyed || s.readableEnded).length;
      expect(closed).toBeGreaterThanOrEqual(400 - 128);
    } finally {
      for (const s of sockets) s.destroy();
      expect(await server.stop()).toBe(0);
    }
  });
});
