import { readFileSync } from 'node:fs';
import { connect } from 'node:net';
import { describe, expect, it } from 'vitest';
import { RANDOM_MODEL_NAME } from '../src/default-model.js';
import { API_KEY, eventually, startServer } from './harness.js';

const rssBytes = (pid: number) =>
  Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) * 1024;

describe('a client that stops reading its stream (built CLI, raw socket)', () => {
  it('has its request ended at the unread bound: blocks back, counted, logged, RSS bounded', async () => {
    // wasm: fast enough to fill the sockets' buffers (megabytes on loopback) in seconds.
    const server = await startServer(['--backend', 'wasm', '--max-unread-events', '16']);
    const { port, hostname } = new URL(server.url);
    const rssAtStart = rssBytes(server.child.pid!);
    // In cache positions a compressed request may generate far past the context: without a
    // bound it would run for minutes, its output queued for a client that reads nothing.
    const body = JSON.stringify({
      model: RANDOM_MODEL_NAME,
      prompt: 'a stream nobody reads',
      max_tokens: 30_000,
      ignore_eos: true,
      n: 16,
      logprobs: 20,
      stream: true,
      kv_compression: { policy: 'window', window: 64 },
    });
    const socket = connect({ port: Number(port), host: hostname });
    socket.on('error', () => {});
    // No 'data' listener and paused: the kernel's buffers fill, then the server's.
    socket.pause();
    socket.write(
      `POST /v1/completions HTTP/1.1\r\nhost: ${hostname}\r\ncontent-type: application/json\r\nauthorization: Bearer ${API_KEY}\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
    );
    try {
      const metric = async (name: string) => (await server.metrics()).get(name) ?? 0;
      expect(
        await eventually(async () => (await metric('kvasir_requests{state="running"}')) === 1),
      ).toBe(true);
      // 16 choices × 16 unread events, after what the socket buffers hold: seconds, not minutes.
      expect(
        await eventually(async () => (await metric('kvasir_stalled_streams_total')) === 1, 1200),
      ).toBe(true);
      expect(await metric('kvasir_requests{state="running"}')).toBe(0);
      expect(await metric('kvasir_kv_blocks{state="used"}')).toBe(0);
      expect(server.output()).toMatch(/events unread; ended it/);
      expect(rssBytes(server.child.pid!) - rssAtStart).toBeLessThan(200 * 1024 * 1024);
      // Everyone else is served as before.
      const ok = await server.client.completions.create({
        model: RANDOM_MODEL_NAME,
        prompt: 'still serving',
        max_tokens: 4,
      });
      expect(ok.choices[0]!.finish_reason).toBeDefined();
    } finally {
      socket.destroy();
      expect(await server.stop()).toBe(0);
    }
  });
});
