import { type ChildProcess, spawn } from 'node:child_process';
import { mkdirSync, openSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { RehearsalError } from './errors.js';
import { inheritedEnv, killGroup } from './exec.js';

/** A running private registry. */
export interface Registry {
  /** `http://127.0.0.1:<port>/`. */
  url: string;
  /** Stops the registry and waits for it to exit; safe to call twice. */
  stop(): Promise<void>;
}

/** Options of {@link startRegistry}. */
export interface RegistryOptions {
  /** A fresh directory for the configuration, storage, users file and log. */
  dir: string;
  /** Names only ever served from this registry's own storage (the packages being rehearsed). */
  ownPackages: readonly string[];
  /**
   * Where every other package comes from: the registry this machine already installs from.
   * A fresh project needs its third-party dependencies; the rehearsed names are never proxied,
   * so a sibling that was not published is a 404, as it would be for a user.
   */
  uplink: string;
  /**
   * A PEM file of extra certificate authorities for the uplink's TLS (`NODE_EXTRA_CA_CERTS`), on
   * machines whose way to the registry needs one (npm's `cafile`, a TLS-inspecting proxy).
   */
  caFile?: string | undefined;
  /** How long Verdaccio may take to answer its first ping. */
  startTimeoutMs: number;
}

/** A port free on loopback now (the kernel picks it); {@link startRegistry} retries if another process takes it first. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address !== null ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

function verdaccioConfig(options: RegistryOptions): string {
  const own = options.ownPackages
    .map((name) => `  '${name}':\n    access: $all\n    publish: $all\n`)
    .join('');
  return [
    `storage: ${JSON.stringify(join(options.dir, 'storage'))}`,
    'auth:',
    '  htpasswd:',
    `    file: ${JSON.stringify(join(options.dir, 'htpasswd'))}`,
    '    max_users: -1',
    'uplinks:',
    '  upstream:',
    `    url: ${JSON.stringify(options.uplink)}`,
    '    timeout: 60s',
    '    max_fails: 5',
    // A failed fetch marks the uplink offline for this long (Verdaccio's default is 5 minutes,
    // which turned one network hiccup into a 404 for every later third-party package).
    '    fail_timeout: 2s',
    'packages:',
    `${own}  '**':`,
    '    access: $all',
    '    publish: $authenticated',
    '    proxy: upstream',
    // npmjs takes packages far over Verdaccio's default 10 MB (a model's weights).
    'max_body_size: 512mb',
    'server:',
    '  keepAliveTimeout: 60',
    'log: { type: stdout, format: pretty, level: warn }',
    '',
  ].join('\n');
}

/**
 * Starts Verdaccio on a free loopback port with its storage under `options.dir`, and resolves
 * once it answers. Publishing the rehearsed names needs no real account (any token is taken).
 *
 * @throws {RehearsalError} REGISTRY_UNAVAILABLE when it exits or stays silent for
 *   `startTimeoutMs` (three ports are tried), with the tail of its log.
 */
export async function startRegistry(options: RegistryOptions): Promise<Registry> {
  mkdirSync(options.dir, { recursive: true });
  const config = join(options.dir, 'config.yaml');
  writeFileSync(config, verdaccioConfig(options));
  const bin = createRequire(import.meta.url).resolve('verdaccio/bin/verdaccio');
  const logFile = join(options.dir, 'verdaccio.log');
  let lastError = '';
  for (let attempt = 0; attempt < 3; attempt++) {
    const port = await freePort();
    const url = `http://127.0.0.1:${port}/`;
    const log = openSync(logFile, 'a');
    const child = spawn(
      process.execPath,
      [bin, '--config', config, '--listen', `127.0.0.1:${port}`],
      {
        cwd: options.dir,
        detached: true,
        stdio: ['ignore', log, log],
        env: {
          ...inheritedEnv(),
          HOME: options.dir,
          NODE_ENV: 'production',
          ...(options.caFile ? { NODE_EXTRA_CA_CERTS: options.caFile } : {}),
        },
      },
    );
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    // Detached, it would outlive a test runner that is killed before its afterAll runs.
    const killOnExit = () => killGroup(child.pid);
    process.once('exit', killOnExit);
    const stop = once(async () => {
      process.off('exit', killOnExit);
      killGroup(child.pid, 'SIGTERM');
      const done = await Promise.race([exited.then(() => true), sleep(5000).then(() => false)]);
      if (!done) killGroup(child.pid, 'SIGKILL');
    });
    if (await answers(url, child, options.startTimeoutMs)) return { url, stop };
    await stop();
    lastError = readFileSync(logFile, 'utf8').slice(-3000);
  }
  throw new RehearsalError(
    'REGISTRY_UNAVAILABLE',
    `Verdaccio did not start on loopback:\n${lastError}`,
    {
      details: { dir: options.dir },
    },
  );
}

async function answers(url: string, child: ChildProcess, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (child.exitCode !== null || child.signalCode !== null) return false;
    try {
      const response = await fetch(`${url}-/ping`, { signal: AbortSignal.timeout(2000) });
      if (response.ok) return true;
    } catch {
      // Not listening yet.
    }
    await sleep(250);
  }
  return false;
}

function once(fn: () => Promise<void>): () => Promise<void> {
  let running: Promise<void> | undefined;
  return () => {
    running ??= fn();
    return running;
  };
}
