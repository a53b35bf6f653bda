import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { createConnection, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** A `redis-server` this process started, on a loopback port, in a temporary directory. */
export interface RedisServerHandle {
  readonly port: number;
  /** `redis://127.0.0.1:<port>` */
  readonly url: string;
  /** Stops the server with SIGKILL (no shutdown handshake), as a crash would. */
  kill(): Promise<void>;
  /** Freezes the server (SIGSTOP): connections stay open but nothing is answered. */
  pause(): void;
  /** Unfreezes it (SIGCONT). */
  resume(): void;
  /** Starts it again on the same port (after `kill`), empty. */
  restart(): Promise<void>;
  /** Stops the server and removes its directory. Idempotent. */
  stop(): Promise<void>;
}

/** Options of {@link startRedisServer}. */
export interface StartRedisServerOptions {
  /** The binary; default `$REDIS_SERVER`, else `redis-server` from PATH. */
  readonly binary?: string;
  /** How long to wait for the server to answer PING (default 10,000 ms). */
  readonly startTimeoutMs?: number;
  /** Extra `redis-server` arguments, e.g. `['--maxmemory', '64mb']`. */
  readonly args?: readonly string[];
}

const INSTALL_HINT =
  'redis-server is required by @kvasir/offload tests and benchmarks: install it with `apt-get install redis-server` (Debian/Ubuntu) or `brew install redis`, or set REDIS_SERVER to its path';

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      const port = typeof addr === 'object' && addr !== null ? addr.port : 0;
      srv.close(() => resolve(port));
    });
  });
}

async function pingOnce(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const sock = createConnection({ host: '127.0.0.1', port });
    const done = (ok: boolean): void => {
      sock.destroy();
      resolve(ok);
    };
    sock.setTimeout(500, () => done(false));
    sock.once('error', () => done(false));
    sock.once('connect', () => sock.write('PING\r\n'));
    sock.once('data', (d) => done(d.toString().startsWith('+PONG')));
  });
}

/**
 * Starts a private `redis-server` on a free loopback port, without persistence, in a new
 * temporary directory, and resolves once it answers PING. For tests and benchmarks.
 * @throws Error naming how to install redis-server when the binary is missing or does not start.
 */
export async function startRedisServer(
  options: StartRedisServerOptions = {},
): Promise<RedisServerHandle> {
  const binary = options.binary ?? process.env.REDIS_SERVER ?? 'redis-server';
  const dir = await mkdtemp(join(tmpdir(), 'kvasir-redis-'));
  const timeout = options.startTimeoutMs ?? 10_000;
  let child: ChildProcess | undefined;
  let port = 0;
  let stopped = false;

  const launch = async (): Promise<void> => {
    const proc = spawn(
      binary,
      [
        '--port',
        String(port),
        '--bind',
        '127.0.0.1',
        '--save',
        '',
        '--appendonly',
        'no',
        '--dir',
        dir,
        '--daemonize',
        'no',
        '--protected-mode',
        'yes',
        ...(options.args ?? []),
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    child = proc;
    let output = '';
    proc.stdout?.on('data', (d: Buffer) => {
      if (output.length < 8192) output += d.toString();
    });
    proc.stderr?.on('data', (d: Buffer) => {
      if (output.length < 8192) output += d.toString();
    });
    const spawnError = new Promise<Error>((resolve) => proc.once('error', resolve));
    const exited = new Promise<number | null>((resolve) =>
      proc.once('exit', (code) => resolve(code)),
    );
    const deadline = Date.now() + timeout;
    for (;;) {
      const early = await Promise.race([
        spawnError.then((e) => `error:${(e as NodeJS.ErrnoException).code ?? e.message}`),
        exited.then((code) => `exit:${code}`),
        new Promise<string>((r) => setTimeout(() => r('wait'), 50)),
      ]);
      if (early.startsWith('error:')) {
        const code = early.slice(6);
        throw new Error(
          code === 'ENOENT'
            ? `${binary} not found. ${INSTALL_HINT}`
            : `could not start ${binary}: ${code}. ${INSTALL_HINT}`,
        );
      }
      if (early.startsWith('exit:')) {
        throw new Error(
          `${binary} exited (${early.slice(5)}) on port ${port}: ${output.trim().slice(-500)}`,
        );
      }
      if (await pingOnce(port)) return;
      if (Date.now() > deadline) {
        proc.kill('SIGKILL');
        throw new Error(
          `${binary} did not answer PING on port ${port} within ${timeout} ms: ${output.trim().slice(-500)}`,
        );
      }
    }
  };

  const killChild = async (): Promise<void> => {
    const c = child;
    child = undefined;
    if (c === undefined || c.exitCode !== null || c.signalCode !== null) return;
    const exited = new Promise<void>((resolve) => c.once('exit', () => resolve()));
    c.kill('SIGKILL');
    await exited;
  };

  // A port found free can be taken before redis binds it; try a few.
  let lastError: unknown;
  for (let attempt = 0; attempt < 5; attempt++) {
    port = await freePort();
    try {
      await launch();
      lastError = undefined;
      break;
    } catch (e) {
      lastError = e;
      await killChild();
      if (e instanceof Error && e.message.includes(INSTALL_HINT)) break;
    }
  }
  if (lastError !== undefined) {
    await rm(dir, { recursive: true, force: true });
    throw lastError;
  }

  return {
    port,
    url: `redis://127.0.0.1:${port}`,
    kill: killChild,
    pause: () => {
      child?.kill('SIGSTOP');
    },
    resume: () => {
      child?.kill('SIGCONT');
    },
    restart: async () => {
      await killChild();
      await launch();
    },
    stop: async () => {
      if (stopped) return;
      stopped = true;
      await killChild();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/** A Redis Cluster of private `redis-server` nodes (masters, and replicas if asked). */
export interface RedisClusterHandle {
  /** The nodes, in the order given to `redis-cli --cluster create`. */
  readonly nodes: readonly RedisServerHandle[];
  /** Seed addresses for an ioredis `Cluster`. */
  readonly startupNodes: readonly { host: string; port: number }[];
  /** Stops every node and removes their directories. */
  stop(): Promise<void>;
}

function run(binary: string, args: readonly string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    const p = spawn(binary, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    p.stdout?.on('data', (d: Buffer) => {
      out += d.toString();
    });
    p.stderr?.on('data', (d: Buffer) => {
      out += d.toString();
    });
    p.once('error', (e) =>
      reject(
        new Error(
          `${binary}: ${(e as NodeJS.ErrnoException).code ?? e.message}. redis-cli comes with redis-server (Debian: apt-get install redis-server)`,
        ),
      ),
    );
    p.once('exit', (code) =>
      code === 0
        ? resolve(out)
        : reject(new Error(`${binary} ${args.join(' ')} exited ${code}: ${out.slice(-500)}`)),
    );
  });
}

/**
 * Starts `nodes` (default 3) private cluster-enabled `redis-server`s on loopback, joins them
 * with `redis-cli --cluster create` (all 16,384 slots spread over them) and resolves once every
 * node reports `cluster_state:ok`. For tests of Redis Cluster compatibility.
 * @throws Error naming how to install Redis when a binary is missing.
 */
export async function startRedisCluster(
  options: StartRedisServerOptions & {
    readonly nodes?: number;
    readonly cli?: string;
    /** Replicas per master (`--cluster-replicas`, default 0); `nodes` counts masters and replicas. */
    readonly replicas?: number;
    /** `cluster-node-timeout` in ms (default 5,000): how long before a silent master fails over. */
    readonly nodeTimeoutMs?: number;
  } = {},
): Promise<RedisClusterHandle> {
  const count = options.nodes ?? 3;
  const replicas = options.replicas ?? 0;
  const cli = options.cli ?? process.env.REDIS_CLI ?? 'redis-cli';
  const nodes: RedisServerHandle[] = [];
  const stop = async (): Promise<void> => {
    await Promise.all(nodes.map((n) => n.stop()));
  };
  try {
    for (let i = 0; i < count; i++) {
      nodes.push(
        await startRedisServer({
          ...options,
          args: [
            '--cluster-enabled',
            'yes',
            '--cluster-config-file',
            'nodes.conf',
            '--cluster-node-timeout',
            String(options.nodeTimeoutMs ?? 5000),
            ...(options.args ?? []),
          ],
        }),
      );
    }
    await run(cli, [
      '--cluster',
      'create',
      ...nodes.map((n) => `127.0.0.1:${n.port}`),
      '--cluster-replicas',
      String(replicas),
      '--cluster-yes',
    ]);
    const deadline = Date.now() + (options.startTimeoutMs ?? 20_000);
    for (const n of nodes) {
      for (;;) {
        const info = await run(cli, ['-p', String(n.port), 'cluster', 'info']);
        if (info.includes('cluster_state:ok') && info.includes(`cluster_known_nodes:${count}`)) {
          break;
        }
        if (Date.now() > deadline)
          throw new Error(`cluster node ${n.port} not ok: ${info.slice(0, 200)}`);
        await new Promise((r) => setTimeout(r, 100));
      }
    }
  } catch (e) {
    await stop();
    throw e;
  }
  return { nodes, startupNodes: nodes.map((n) => ({ host: '127.0.0.1', port: n.port })), stop };
}
