import { execFile } from 'node:child_process';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:net';
import { tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { CACHE_DIR, CLI, startServer } from './harness.js';

interface Run {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

/**
 * Runs the built CLI to its end. A process that has not ended after `timeoutMs` is killed and
 * reported as such (the failure mode of a start-up that spins instead of exiting).
 */
function kvasir(args: readonly string[], timeoutMs = 90_000): Promise<Run> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [CLI, ...args],
      {
        timeout: timeoutMs,
        killSignal: 'SIGKILL',
        maxBuffer: 16 * 1024 * 1024,
        env: { ...process.env, KVASIR_API_KEY: '', KVASIR_DEBUG: '' },
      },
      (error, stdout, stderr) => {
        const killed = (error as { killed?: boolean } | null)?.killed === true;
        resolve({
          code: killed ? null : error ? ((error as { code?: number }).code ?? 1) : 0,
          stdout,
          stderr: killed ? `${stderr}\n[still running after ${timeoutMs} ms: killed]` : stderr,
        });
      },
    );
  });
}

const cpu = ['--backend', 'cpu', '--cache-dir', CACHE_DIR, '--model', 'random'];

/** A refusal as the issue asks: non-zero exit, one typed message, no stack trace. */
function expectRefusal(run: Run, code: string, ...mentions: RegExp[]): void {
  expect(run.code, run.stderr).toBe(1);
  expect(run.stderr).toContain(`[${code}]`);
  expect(run.stderr).not.toMatch(/^ {4}at /m);
  for (const m of mentions) expect(run.stderr).toMatch(m);
}

describe('start-up refuses what cannot work, with a typed error (built CLI)', () => {
  it('an offload disk directory that cannot be created exits at once (no endless mkdir under /proc)', async () => {
    const run = await kvasir(
      ['serve', ...cpu, '--port', '0', '--offload-disk-dir', '/proc/kvasir-test/kv'],
      60_000,
    );
    expectRefusal(run, 'OFFLOAD_UNAVAILABLE', /--offload-disk-dir/, /\/proc\/kvasir-test\/kv/);
  });

  it('an offload disk directory below a regular file is refused by name, not an ENOTDIR stack', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'kvasir-startup-'));
    const file = join(dir, 'a-file');
    await writeFile(file, 'not a directory');
    const run = await kvasir([
      'serve',
      ...cpu,
      '--port',
      '0',
      '--offload-disk-dir',
      join(file, 'kv'),
    ]);
    expectRefusal(run, 'OFFLOAD_UNAVAILABLE', /--offload-disk-dir/, /is a file, not a directory/);
  });

  it('a port in use ends in LISTEN_FAILED with the --port 0 hint', async () => {
    const blocker: Server = createServer();
    await new Promise<void>((r) => blocker.listen(0, '127.0.0.1', r));
    const port = (blocker.address() as { port: number }).port;
    try {
      const run = await kvasir(['serve', ...cpu, '--port', String(port)]);
      expectRefusal(run, 'LISTEN_FAILED', new RegExp(`port ${port} is already in use`), /--port 0/);
    } finally {
      blocker.close();
    }
  });

  it('a --host that is not this machine, or does not resolve, ends in LISTEN_FAILED', async () => {
    // 203.0.113.0/24 is TEST-NET-3: never a local address.
    const foreign = await kvasir(['serve', ...cpu, '--port', '0', '--host', '203.0.113.7']);
    expectRefusal(foreign, 'LISTEN_FAILED', /203\.0\.113\.7/, /--host/);
    const unknown = await kvasir([
      'serve',
      ...cpu,
      '--port',
      '0',
      '--host',
      'no-such-host.invalid',
    ]);
    expectRefusal(unknown, 'LISTEN_FAILED', /no-such-host\.invalid/, /--host/);
  });

  it('--preemption-mode swap with nowhere to swap to is refused, not silently recompute', async () => {
    const noTier = await kvasir([
      'serve',
      ...cpu,
      '--port',
      '0',
      '--preemption-mode',
      'swap',
      '--offload-host-bytes',
      '0',
    ]);
    expectRefusal(noTier, 'INVALID_CONFIG', /nowhere to swap to/, /--preemption-mode recompute/);
    const noSlots = await kvasir([
      'serve',
      ...cpu,
      '--port',
      '0',
      '--preemption-mode',
      'swap',
      '--swap-blocks',
      '0',
    ]);
    expectRefusal(noSlots, 'INVALID_CONFIG', /--swap-blocks is 0/);
  });

  it('swap preemption with the default host budget says in the banner how much it can hold', async () => {
    const server = await startServer(['--backend', 'cpu', '--preemption-mode', 'swap']);
    try {
      expect(server.output()).toMatch(/preemption swap \(\d+ blocks = [\d.]+ \w+ in host\)/);
    } finally {
      expect(await server.stop()).toBe(0);
    }
  });
});

describe('flags and config files are checked and errors name the fix (built CLI)', () => {
  it('an unknown config key is refused with the closest valid key', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'kvasir-config-'));
    const file = join(dir, 'kvasir.json');
    await writeFile(file, JSON.stringify({ prot: 9000 }));
    const top = await kvasir(['info', ...cpu, '--config', file]);
    expectRefusal(top, 'INVALID_CONFIG', /unknown key "prot"/, /did you mean "port"\?/);
    await writeFile(file, JSON.stringify({ offload: { hostbytes: 1 } }));
    const nested = await kvasir(['info', ...cpu, '--config', file]);
    expectRefusal(nested, 'INVALID_CONFIG', /did you mean "offload\.hostBytes"\?/);
  });

  it('invalid JSON in a config file names the line and column', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'kvasir-config-'));
    const file = join(dir, 'kvasir.json');
    await writeFile(file, '{\n  "port": 9000,\n  "host" "0.0.0.0"\n}\n');
    const run = await kvasir(['info', ...cpu, '--config', file]);
    expectRefusal(run, 'INVALID_CONFIG', /not valid JSON/, /line 3, column 10/);
    await writeFile(file, '{"port": tru}');
    const token = await kvasir(['info', ...cpu, '--config', file]);
    expectRefusal(token, 'INVALID_CONFIG', /line 1, column 13/);
  });

  it('a Redis URL that is not redis:// is refused before anything starts', async () => {
    const run = await kvasir(['serve', ...cpu, '--port', '0', '--offload-redis-url', 'http://foo']);
    expectRefusal(run, 'INVALID_CONFIG', /--offload-redis-url/, /redis:\/\//);
  });

  it('--block-size 7 names the allowed values', async () => {
    const run = await kvasir(['info', ...cpu, '--block-size', '7']);
    expectRefusal(
      run,
      'INVALID_CONFIG',
      /--block-size/,
      /expected one of 1, 2, 4, 8, 16, 32, got 7/,
    );
  });

  it('generate and info do not list the server-only flags; serve does', async () => {
    for (const command of ['generate', 'info']) {
      const help = (await kvasir([command, '--help'])).stdout;
      expect(help, command).not.toMatch(/--port|--host|--api-key/);
    }
    const serve = (await kvasir(['serve', '--help'])).stdout;
    for (const flag of ['--port', '--host', '--api-key']) expect(serve).toContain(flag);
  });

  it('router --unhealthy-after 0 is refused before anything starts', async () => {
    const run = await kvasir([
      'router',
      '--replica',
      'http://127.0.0.1:1',
      '--unhealthy-after',
      '0',
    ]);
    expect(run.code).toBe(1);
    expect(run.stderr).toMatch(/--unhealthy-after <n>.*expected an integer ≥ 1/);
    expect(run.stderr).not.toMatch(/^ {4}at /m);
  });

  it('bench --concurrency 0 is refused instead of running nothing and exiting 0', async () => {
    const run = await kvasir(['bench', ...cpu, '--concurrency', '0', '--duration', '1']);
    expect(run.code).toBe(1);
    expect(run.stderr).toMatch(/--concurrency <n>.*expected an integer ≥ 1/);
    expect(run.stderr).not.toMatch(/^ {4}at /m);
  });
});

describe('the CPU backend and the WebGPU probe (built CLI)', () => {
  it('plans the CPU backend from host memory, not a 512 MiB "GPU"', async () => {
    const run = await kvasir(['info', ...cpu, '--json']);
    expect(run.code, run.stderr).toBe(0);
    const plan = JSON.parse(run.stdout).memory_plan;
    expect(plan.memory_source).toBe('host-available');
    expect(plan.device_bytes).toBeLessThanOrEqual(totalmem());
    expect(plan.device_bytes).not.toBe(512 * 1024 * 1024);
  });

  it("keeps Dawn's native warnings out of the output when the chosen backend is the CPU", async () => {
    // `auto` on a machine without a hardware GPU ends on the CPU: Dawn is only probed, in a
    // child process, and its warnings (paths of Dawn's own build machine) stay there. With a
    // hardware GPU, Dawn is opened on the backend the probe found, which it does not warn about.
    for (const backend of ['auto', 'cpu']) {
      const run = await kvasir([
        'info',
        '--backend',
        backend,
        '--cache-dir',
        CACHE_DIR,
        '--model',
        'random',
      ]);
      expect(run.code, run.stderr).toBe(0);
      expect(run.stderr, backend).not.toMatch(/Warning:|BackendVk|third_party\/dawn/);
    }
  });
});

describe('kvasir simulate reports what its rate search found (built CLI)', () => {
  it("says when the answer is the search's upper bound, and shows progress", async () => {
    const json = await kvasir(['simulate', '--requests', '100', '--json', '--no-progress']);
    expect(json.code, json.stderr).toBe(0);
    expect(json.stderr).toBe('');
    const kvasirRow = JSON.parse(json.stdout).systems.find(
      (s: { system: string }) => s.system === 'kvasir',
    );
    expect(kvasirRow.limited_by).toBe('max-rate');
    const text = await kvasir(['simulate', '--requests', '100']);
    expect(text.code, text.stderr).toBe(0);
    expect(text.stdout).toMatch(/kvasir +max rate ≥ [\d.]+ req\/s: the search's upper bound/);
    expect(text.stderr).toMatch(/\[kvasir\] kvasir: rate [\d.]+ req\/s → [\d.]+ s\/token/);
  });
});

describe('--weight-quant (built CLI)', () => {
  it('int8 quantizes an unquantized model at load, as info says, and is refused for a GGUF of blocks', async () => {
    const stored = await kvasir(['info', ...cpu, '--json']);
    const int8 = await kvasir(['info', ...cpu, '--json', '--weight-quant', 'int8']);
    expect(stored.code, stored.stderr).toBe(0);
    expect(int8.code, int8.stderr).toBe(0);
    expect(JSON.parse(stored.stdout).weights.at_load).toBe('as-stored');
    expect(JSON.parse(int8.stdout).weights.at_load).toBe('int8');
    const text = await kvasir(['info', ...cpu, '--weight-quant', 'int8']);
    expect(text.stdout).toMatch(/^at load +matrices quantized to int8, 32-column scales/m);
    const gguf = join(
      import.meta.dirname,
      '../../../tooling/ggml-fixtures/models/tiny-llama-Q4_K_M.gguf',
    );
    const refused = await kvasir([
      'info',
      '--backend',
      'cpu',
      '--model',
      gguf,
      '--weight-quant',
      'int8',
    ]);
    expectRefusal(
      refused,
      'INVALID_CONFIG',
      /--weight-quant int8 is for F16, BF16 and F32 files/,
      /already quantized \(.*Q4_K/,
    );
  });
});
