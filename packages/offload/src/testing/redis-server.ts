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
