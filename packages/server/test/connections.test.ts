import { connect, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { defaultMaxConnections } from '../src/http/connections.js';
import { createServer, type KvasirServer } from '../src/server.js';
import { MODEL_ID, ScriptedEngine } from './scripted-engine.js';

// Clients that hold connections open: raw TCP sockets that never close their side.

let server: KvasirServer | undefined;
const sockets: Socket[] = [];
afterEach(async () => {
  for (const s of sockets.splice(0)) s.destroy();
  await server?.close(0);
  server = undefined;
});

async function start(options: Partial<Parameters<typeof createServer>[0]> = {}) {
  const engine = new ScriptedEngine();
  server = createServer({ engine, port: 0, ...options });
  const port = Number(new URL(await server.listen()).port);
  return { engine, port };
}

/** Opens a socket that never closes its side; `send` is written once connected. */
function open(port: number, send = ''): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = connect({ port, host: '127.0.0.1', allowHalfOpen: true }, () => {
      if (send) socket.write(send);
      resolve(socket);
    });
    socket.on('error', () => {});
    socket.once('error', reject);
    sockets.push(socket);
  });
}

const connections = () =>
  new Promise<number>((resolve, reject) =>
    server!.app.server.getConnections((error, count) => (error ? reject(error) : resolve(count))),
  );

async function until(check: () => Promise<boolean>, ms: number): Promise<boolean> {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await check()) return true;
    await new Promise((r) => setTimeout(r, 50));
  }
  return check();
}

/** Reads what the server sends until it closes its side (or `ms` pass). */
function received(socket: Socket, ms: number): Promise<string> {
  return new Promise((resolve) => {
    let data = '';
    socket.on('data', (chunk) => {
      data += chunk.toString();
    });
    socket.once('end', () => resolve(data));
    setTimeout(() => resolve(data), ms);
  });
}

describe('connections that never finish a request', () => {
  it('silent and half-sent requests get 408 and the server drops them, though the peer never closes', async () => {
    const { port } = await start({ headersTimeoutMs: 400 });
    const silent = await open(port);
    const half = await open(port, `GET /health HTTP/1.1\r\nHost: x\r\n`);
    const slow = await open(
      port,
      `POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 50\r\n\r\n{"prompt":`,
    );
    expect(await connections()).toBe(3);
    const [a, b] = await Promise.all([received(silent, 3000), received(half, 3000)]);
    expect(a).toMatch(/^HTTP\/1.1 408 /);
    expect(b).toMatch(/^HTTP\/1.1 408 /);
    // The server closes both by itself; the slow body is bounded by the request timeout instead.
    expect(await until(async () => (await connections()) <= 1, 5000)).toBe(true);
    expect(slow.destroyed).toBe(false);
  });

  it('idle sockets beyond the cap make way for new ones: /health answers through 60 silent sockets on a cap of 16', async () => {
    const { port } = await start({ maxConnections: 16, headersTimeoutMs: 60_000 });
    for (let i = 0; i < 60; i++) await open(port);
    expect(await connections()).toBeLessThanOrEqual(16);
    const started = Date.now();
    const res = await fetch(`http://127.0.0.1:${port}/health`);
    expect(res.status).toBe(200);
    expect(Date.now() - started).toBeLessThan(2000);
  });

  it('when every connection is busy, a new one gets 503 at once instead of waiting', async () => {
    const { engine, port } = await start({ maxConnections: 4 });
    let release!: () => void;
    engine.gate = new Promise<void>((r) => {
      release = r;
    });
    const body = JSON.stringify({ model: MODEL_ID, prompt: 'x', max_tokens: 2 });
    const busy = Array.from({ length: 4 }, () =>
      fetch(`http://127.0.0.1:${port}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body,
      }),
    );
    for (let i = 0; i < 4; i++) await engine.nextAdmitted();
    const refused = await received(await open(port), 3000);
    expect(refused).toMatch(/^HTTP\/1.1 503 /);
    expect(refused).toContain('"code":"too_many_connections"');
    release();
    for (const res of await Promise.all(busy)) expect(res.status).toBe(200);
    const metrics = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
    expect(metrics).toContain('kvasir_request_errors_total{code="too_many_connections"} 1');
  });

  it('the default cap leaves room under the open-file limit', () => {
    expect(defaultMaxConnections(1024)).toBe(896);
    expect(defaultMaxConnections(1_048_576)).toBe(4096);
    expect(defaultMaxConnections(undefined)).toBe(4096);
    expect(defaultMaxConnections(64)).toBe(16);
  });
});

describe('request bodies', () => {
  it('a body with a __proto__ key is a 400 naming it, not "not valid JSON"', async () => {
    const { port } = await start();
    const post = (text: string) =>
      fetch(`http://127.0.0.1:${port}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: text,
      });
    for (const [text, param] of [
      ['{"prompt":"x","__proto__":{"admin":true}}', '__proto__'],
      [
        '{"prompt":"x","kv_compression":{"policy":"sinks","constructor":{"prototype":{}}}}',
        'kv_compression.constructor',
      ],
      ['{"prompt":"x","\\u005f_proto__":1}', '__proto__'],
    ] as const) {
      const res = await post(text);
      expect(res.status).toBe(400);
      const { error } = (await res.json()) as { error: { message: string; param: string } };
      expect(error.param).toBe(param);
      expect(error.message).toMatch(/is not allowed/);
    }
    const bad = await post('{"prompt": ');
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { error: { message: string } }).error.message).toMatch(
      /not valid JSON/,
    );
    const fine = await post(
      JSON.stringify({ model: MODEL_ID, prompt: 'constructor __proto__', max_tokens: 1 }),
    );
    expect(fine.status).toBe(200);
  });
});
