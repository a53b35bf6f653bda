import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { engineChainRoot, promptBlockHashes } from './block-hashes.js';
import { RouterError } from './errors.js';
import { KvRouter } from './router.js';
import { defineRoutingPolicy } from './routing-policy.js';

type Handler = (req: IncomingMessage, res: ServerResponse, body: string) => void;

/** A stand-in replica: /health answers 200, everything else goes to `handler`. */
async function fakeReplica(
  handler: Handler,
): Promise<{ url: string; server: Server; hits: () => number }> {
  let hits = 0;
  const server = createServer((req, res) => {
    if (req.url === '/health') {
      res.end('{"status":"ok"}');
      return;
    }
    let body = '';
    req.on('data', (c) => {
      body += c;
    });
    req.on('end', () => {
      hits++;
      handler(req, res, body);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    server,
    hits: () => hits,
  };
}

/** A URL nothing listens on. */
async function deadUrl(): Promise<string> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(s.address() as AddressInfo).port}`;
  await new Promise((r) => s.close(r));
  return url;
}

const SSE =
  'data: {"choices":[{"text":"a"}]}\n\ndata: {"choices":[{"text":"b"}]}\n\ndata: [DONE]\n\n';

const cleanup: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanup.splice(0)) await c();
});

async function startRouter(urls: string[], policy: 'round-robin' | 'kv-aware' = 'round-robin') {
  const router = new KvRouter({
    replicas: urls.map((url) => ({ url })),
    policy,
    port: 0,
    healthIntervalMs: 60_000,
    log: () => {},
  });
  const url = await router.listen();
  cleanup.push(() => router.close());
  return { router, url };
}

const post = (url: string, body: unknown) =>
  fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: 'Bearer k' },
    body: JSON.stringify(body),
  });

describe('KvRouter proxy (stand-in replicas on loopback)', () => {
  it('passes an SSE stream through byte for byte, with headers and the auth header forwarded', async () => {
    let auth: string | undefined;
    const a = await fakeReplica((req, res) => {
      auth = req.headers.authorization;
      res.writeHead(200, { 'content-type': 'text/event-stream', 'x-request-id': 'r1' });
      res.write(SSE.slice(0, 20));
      setTimeout(() => res.end(SSE.slice(20)), 20);
    });
    cleanup.push(() => a.server.close());
    const { url } = await startRouter([a.url]);
    const res = await post(url, { model: 'm', prompt: 'hi', stream: true });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('text/event-stream');
    expect(res.headers.get('x-request-id')).toBe('r1');
    expect(res.headers.get('x-kvasir-replica')).toBe(a.url);
    expect(await res.text()).toBe(SSE);
    expect(auth).toBe('Bearer k');
  });

  it('moves a request off a replica that refuses connections, a 503 and a replica that dies before its first byte', async () => {
    const dead = await deadUrl();
    const draining = await fakeReplica((_req, res) => {
      res.writeHead(503, { 'content-type': 'application/json' });
      res.end('{"error":{"message":"draining"}}');
    });
    const dying = await fakeReplica((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.flushHeaders();
      setTimeout(() => res.socket?.destroy(), 20); // headers only, no byte of body
    });
    const good = await fakeReplica((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{"ok":true}');
    });
    for (const r of [draining, dying, good]) cleanup.push(() => r.server.close());
    const { router, url } = await startRouter([dead, draining.url, dying.url, good.url]);
    // The dead one failed its first health check; the others are tried in turn until one answers.
    for (let i = 0; i < 3; i++) {
      const res = await post(url, { model: 'm', prompt: 'x' });
      expect(res.status).toBe(200);
      expect(await res.json()).toEqual({ ok: true });
      expect(res.headers.get('x-kvasir-replica')).toBe(good.url);
    }
    expect(router.counters.retries).toBeGreaterThan(0);
    // Nothing listens at the dead one: out. The one that reset a connection is alive: still in.
    expect(router.replicas().find((r) => r.url === dead)!.healthy).toBe(false);
    expect(router.replicas().find((r) => r.url === dying.url)!.healthy).toBe(true);
    expect(
      router
        .replicas()
        .every((r) => r.inFlight === 0 && r.activeBlocks === 0 && r.pendingPrefillBlocks === 0),
    ).toBe(true);
  });

  it('keeps a replica whose health check is slow until it fails several in a row', async () => {
    let slow = false;
    const server = createServer((req, res) => {
      if (req.url === '/health') {
        if (slow) setTimeout(() => res.end('ok'), 400);
        else res.end('ok');
        return;
      }
      res.end('{}');
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    cleanup.push(() => server.close());
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const router = new KvRouter({
      replicas: [{ url }],
      port: 0,
      healthIntervalMs: 60,
      healthTimeoutMs: 100,
      unhealthyAfter: 4,
      log: () => {},
    });
    const routerUrl = await router.listen();
    cleanup.push(() => router.close());
    expect(router.replicas()[0]!.healthy).toBe(true);
    slow = true;
    await new Promise((r) => setTimeout(r, 3 * 110));
    // At most three checks of 100 ms can have timed out by now: still in.
    expect(router.replicas()[0]!.healthy).toBe(true);
    const until = async (want: boolean) => {
      for (let i = 0; i < 200 && router.replicas()[0]!.healthy !== want; i++) {
        await new Promise((r) => setTimeout(r, 25));
      }
      return router.replicas()[0]!.healthy;
    };
    expect(await until(false)).toBe(false);
    expect(router.replicas()[0]!.healthy).toBe(false);
    // Out, but busy rather than gone: with no healthy replica left, it still gets requests.
    const res = await post(routerUrl, { model: 'm', prompt: 'x' });
    expect(res.status).toBe(200);
    expect(res.headers.get('x-kvasir-replica')).toBe(url);
    slow = false;
    expect(await until(true)).toBe(true);
  });

  it('ends a stream its replica broke after the first byte with an OpenAI error event and [DONE]', async () => {
    const a = await fakeReplica((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write('data: {"choices":[{"text":"a"}]}\n\n');
      setTimeout(() => res.socket?.destroy(), 30);
    });
    cleanup.push(() => a.server.close());
    const { router, url } = await startRouter([a.url]);
    const res = await post(url, { model: 'm', prompt: 'x', stream: true });
    const text = await res.text();
    const events = text.split('\n\n').filter((e) => e !== '');
    expect(events[0]).toBe('data: {"choices":[{"text":"a"}]}');
    expect(JSON.parse(events[1]!.slice(6)).error).toMatchObject({
      code: 'replica_failed',
      type: 'server_error',
    });
    expect(events[2]).toBe('data: [DONE]');
    expect(router.counters.brokenStreams).toBe(1);
  });

  it('answers 503 naming the cause when every replica is down, and the last refusal when all are full', async () => {
    const { url } = await startRouter([await deadUrl()]);
    const res = await post(url, { model: 'm', prompt: 'x' });
    expect(res.status).toBe(503);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe('no_replica');
    const full = await fakeReplica((_req, res2) => {
      res2.writeHead(429, { 'content-type': 'application/json', 'retry-after': '2' });
      res2.end('{"error":{"message":"queue full"}}');
    });
    cleanup.push(() => full.server.close());
    const r2 = await startRouter([full.url]);
    const res2 = await post(r2.url, { model: 'm', prompt: 'x' });
    expect(res2.status).toBe(429);
    expect(res2.headers.get('retry-after')).toBe('2');
    expect(await res2.json()).toEqual({ error: { message: 'queue full' } });
  });

  it('refuses a body over the limit with 413, and passes other paths through', async () => {
    const a = await fakeReplica((req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ path: req.url }));
    });
    cleanup.push(() => a.server.close());
    const router = new KvRouter({
      replicas: [{ url: a.url }],
      port: 0,
      maxBodyBytes: 100,
      log: () => {},
    });
    const url = await router.listen();
    cleanup.push(() => router.close());
    expect((await post(url, { prompt: 'x'.repeat(200) })).status).toBe(413);
    expect(await (await fetch(`${url}/v1/models`)).json()).toEqual({ path: '/v1/models' });
    expect((await fetch(`${url}/health`)).status).toBe(200);
    expect(await (await fetch(`${url}/metrics`)).text()).toContain(
      `kvasir_router_replica_up{replica="${a.url}"} 1`,
    );
  });

  it('explains each route in x-kvasir-route when asked: cached blocks by events and by prediction, and load', async () => {
    const json = (_req: IncomingMessage, res: ServerResponse) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{}');
    };
    const a = await fakeReplica(json);
    const b = await fakeReplica(json);
    cleanup.push(
      () => a.server.close(),
      () => b.server.close(),
    );
    const router = new KvRouter({
      replicas: [{ url: a.url }, { url: b.url }],
      policy: 'kv-aware',
      port: 0,
      healthIntervalMs: 60_000,
      explainRoutes: true,
      log: () => {},
    });
    const url = await router.listen();
    cleanup.push(() => router.close());
    const tokens = Array.from({ length: 64 }, (_, i) => i + 1);
    const hashes = promptBlockHashes(tokens, 16, engineChainRoot('m'));
    router.index.apply(b.url, {
      type: 'BlockStored',
      blockHashes: hashes.slice(0, 3),
      parentBlockHash: null,
      tokenIds: tokens.slice(0, 48),
      blockSize: 16,
      medium: 'GPU',
    });
    const first = await post(url, { model: 'm', prompt: tokens, max_tokens: 16 });
    expect(first.headers.get('x-kvasir-replica')).toBe(b.url);
    expect(JSON.parse(first.headers.get('x-kvasir-route')!)).toEqual({
      promptBlocks: 4,
      chosen: 1,
      why: 'kv-aware: 3/4 prompt blocks cached (weighted 3.0), cost 1.0 = 1 x (1.0 + 0 queued) + 0 active',
      candidates: [
        [0, 0, 0, 0, 0, 0],
        [1, 3, 0, 0, 0, 0],
      ],
    });
    // The first request's fourth block is predicted on b until b's events name it.
    const second = await post(url, { model: 'm', prompt: tokens, max_tokens: 16 });
    const route = JSON.parse(second.headers.get('x-kvasir-route')!) as { candidates: number[][] };
    expect(route.candidates[1]!.slice(0, 3)).toEqual([1, 4, 1]);
    // Requests the policy does not route (other paths) are not explained.
    expect((await fetch(`${url}/v1/models`)).headers.get('x-kvasir-route')).toBeNull();
  });

  it('keeps x-kvasir-route a valid header whatever a plug-in policy explains, and leaves it out by default', async () => {
    const a = await fakeReplica((_req, res) => res.end('{}'));
    cleanup.push(() => a.server.close());
    const policy = defineRoutingPolicy({
      name: 'odd',
      choose: (_request, candidates) => candidates[0]!,
      explain: () => 'préfixe → 3 blocs\r\nx-injected: 1',
    });
    const explained = new KvRouter({
      replicas: [{ url: a.url }],
      policy,
      port: 0,
      explainRoutes: true,
      log: () => {},
    });
    const url = await explained.listen();
    cleanup.push(() => explained.close());
    const res = await post(url, { model: 'm', prompt: 'x' });
    expect(res.status).toBe(200);
    expect(res.headers.get('x-injected')).toBeNull();
    expect(JSON.parse(res.headers.get('x-kvasir-route')!).why).toBe(
      'pr?fixe ? 3 blocs\r\nx-injected: 1',
    );
    const { url: plain } = await startRouter([a.url]);
    expect(
      (await post(plain, { model: 'm', prompt: 'x' })).headers.get('x-kvasir-route'),
    ).toBeNull();
  });
});

describe('KvRouter options', () => {
  it('routes with cache-aware unless told otherwise', () => {
    expect(new KvRouter({ replicas: [{ url: 'http://a:1' }] }).policy.name).toBe('cache-aware');
  });

  it.each([
    [{ replicas: [] }, /at least one replica/],
    [{ replicas: [{ url: 'http://a:1' }, { url: 'http://a:1' }] }, /listed twice/],
    [
      { replicas: [{ url: 'http://a:1' }], blockSize: 0 },
      /blockSize must be a positive integer, got 0/,
    ],
    [
      { replicas: [{ url: 'http://a:1' }], unhealthyAfter: 0 },
      /unhealthyAfter must be a positive integer, got 0/,
    ],
    [
      { replicas: [{ url: 'http://a:1' }], unhealthyAfter: 1.5 },
      /unhealthyAfter must be a positive integer, got 1.5/,
    ],
    [
      { replicas: [{ url: 'http://a:1' }], cacheAware: { cacheThreshold: 1.2 } },
      /cacheThreshold must be from 0 to 1, got 1.2/,
    ],
    [
      { replicas: [{ url: 'http://a:1' }], cacheAware: { balanceRelThreshold: 0.5 } },
      /balanceRelThreshold must be a number ≥ 1, got 0.5/,
    ],
  ])('refuses %j with INVALID_OPTIONS naming the option', (options, message) => {
    let error: unknown;
    try {
      new KvRouter(options);
    } catch (e) {
      error = e;
    }
    expect(RouterError.isInstance(error)).toBe(true);
    expect((error as RouterError).code).toBe('INVALID_OPTIONS');
    expect((error as Error).message).toMatch(message);
  });
});
