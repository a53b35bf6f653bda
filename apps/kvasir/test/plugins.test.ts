import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import type OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { API_KEY, CACHE_DIR, CLI, eventually, type ServerProcess, startServer } from './harness.js';

// Users' plug-in modules that misbehave, loaded by real `kvasir serve` processes through the
// real loader: the engine must keep serving, and fail at most the requests a plug-in decided.

let dir: string;
const MODEL = 'kvasir-random-tiny';
const cpu = ['--backend', 'cpu'];

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kvasir-plugins-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function module(name: string, source: string): Promise<string> {
  const path = join(dir, name);
  await writeFile(path, source);
  return path;
}

/** A v1 eviction policy keeping LRU order in a Map, with `hooks` replacing some of its own. */
const evictionModule = (hooks: string) => `
const order = new Map();
export default {
  specificationVersion: 'v1',
  name: 'user',
  insert(k) { order.delete(k); order.set(k, true); },
  touch(k) { if (order.delete(k)) order.set(k, true); },
  remove(k) { order.delete(k); },
  chooseVictim() { for (const k of order.keys()) return k; return undefined; },
  ${hooks}
};
`;

const busy = (ms: number) => `{ const t = Date.now(); while (Date.now() - t < ${ms}) {} }`;

/** A v1 KV compression policy keeping the last `keep` blocks, whose `select` runs `body` first. */
const compressionModule = (name: string, body: string) => `
export default {
  specificationVersion: 'v1',
  name: '${name}',
  attention: 'none',
  maxBlocks: () => 4,
  select(v) {
    ${body}
    const drop = [];
    for (let i = 0; i < v.numBlocks - 4; i++) drop.push(i);
    return drop;
  },
};
`;

const prompt = (seed: number, len = 100) =>
  Array.from({ length: len }, (_, j) => (seed * 131 + j * 17) % 500);

type Body = OpenAI.CompletionCreateParamsNonStreaming & {
  kv_compression?: unknown;
  ignore_eos?: boolean;
};

/** POSTs a completion; the HTTP status and the parsed body. */
async function complete(
  server: ServerProcess,
  body: Partial<Body>,
): Promise<{ status: number; body: { choices?: { text: string }[]; error?: unknown } }> {
  const res = await fetch(`${server.url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${API_KEY}` },
    body: JSON.stringify({ model: MODEL, temperature: 0, ignore_eos: true, ...body }),
  });
  return {
    status: res.status,
    body: (await res.json()) as { choices?: { text: string }[]; error?: unknown },
  };
}

const health = async (server: ServerProcess) =>
  (await (await fetch(`${server.url}/health`)).json()) as { status: string };

const failures = async (server: ServerProcess, plugin: string) =>
  (await server.metrics()).get(`kvasir_plugin_failures_total{plugin="${plugin}"}`);

const usedBlocks = async (server: ServerProcess) =>
  (await server.metrics()).get('kvasir_kv_blocks{state="used"}');

describe('a misbehaving eviction plug-in cannot take the server down (real process)', () => {
  it('insert throws: completions succeed, an aborted stream does not crash the process', async () => {
    const policy = await module(
      'insert-throws.mjs',
      evictionModule("insert() { throw new Error('bug'); },"),
    );
    const server = await startServer([...cpu, '--eviction-policy', policy]);
    try {
      const first = await complete(server, { prompt: prompt(1), max_tokens: 60 });
      expect(first.status).toBe(200);
      // A streamed request aborted by its client mid-way: the abort path frees its blocks.
      const controller = new AbortController();
      const res = await fetch(`${server.url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${API_KEY}` },
        body: JSON.stringify({
          model: MODEL,
          prompt: prompt(2),
          max_tokens: 400,
          stream: true,
          ignore_eos: true,
        }),
        signal: controller.signal,
      });
      const reader = res.body!.getReader();
      await reader.read();
      await reader.read();
      controller.abort();
      expect(await eventually(async () => (await usedBlocks(server)) === 0)).toBe(true);
      expect(server.child.exitCode).toBeNull();
      expect((await health(server)).status).toBe('ok');
      expect((await complete(server, { prompt: prompt(1), max_tokens: 8 })).status).toBe(200);
      expect(await failures(server, 'eviction:user')).toBe(1);
      const said = server.output().match(/plug-in eviction:user failed/g) ?? [];
      expect(said).toHaveLength(1);
      expect(server.output()).toMatch(/threw from insert: bug; using the built-in lru policy/);
    } finally {
      expect(await server.stop()).toBe(0);
    }
  });

  it('a victim that does not exist, or a touch that throws: every request is served', async () => {
    for (const hooks of ['chooseVictim: () => 999999,', "touch() { throw new Error('t'); },"]) {
      const policy = await module('victim.mjs', evictionModule(hooks));
      const server = await startServer([
        ...cpu,
        '--eviction-policy',
        policy,
        '--num-gpu-blocks',
        '24',
      ]);
      try {
        const statuses: number[] = [];
        // Five different prompts of 7 blocks each through a 24-block cache: cached prefixes
        // must be reclaimed; the same prompt again is a hit (touch).
        for (const seed of [1, 2, 3, 1, 4, 5, 1]) {
          statuses.push((await complete(server, { prompt: prompt(seed), max_tokens: 16 })).status);
        }
        expect(statuses).toEqual([200, 200, 200, 200, 200, 200, 200]);
        expect((await health(server)).status).toBe('ok');
        expect(await usedBlocks(server)).toBe(0);
        expect(await failures(server, 'eviction:user')).toBe(1);
      } finally {
        expect(await server.stop()).toBe(0);
      }
    }
  });

  it('a hook taking 1.5 s per call stalls the server once, then LRU serves; SIGTERM drains', async () => {
    const calls = join(dir, 'slow-calls.txt');
    await writeFile(calls, '');
    const policy = await module(
      'slow.mjs',
      `import { appendFileSync } from 'node:fs';\n${evictionModule(
        `insert(k) { appendFileSync(${JSON.stringify(calls)}, 'x'); ${busy(1500)} },`,
      )}`,
    );
    const server = await startServer([...cpu, '--eviction-policy', policy]);
    try {
      let polls = 0;
      let polling = true;
      const poll = (async () => {
        while (polling) {
          expect((await health(server)).status).toBe('ok');
          polls++;
          await new Promise((r) => setTimeout(r, 50));
        }
      })();
      // Each request frees about 7 full blocks: each would be a 1.5 s insert without a budget.
      for (const seed of [1, 2, 3, 4]) {
        expect((await complete(server, { prompt: prompt(seed), max_tokens: 8 })).status).toBe(200);
      }
      polling = false;
      await poll;
      expect(polls).toBeGreaterThan(0);
      // The slow hook ran once; the built-in LRU took every later insert.
      expect(await readFile(calls, 'utf8')).toBe('x');
      expect(server.output()).toMatch(
        /eviction policy user insert took \d+ ms, over the 250 ms budget of a plug-in call; disabled/,
      );
      // A long generation in flight when SIGTERM comes: the server drains it and exits 0.
      const long = complete(server, { prompt: prompt(5), max_tokens: 200 });
      await eventually(
        async () => (await server.metrics()).get('kvasir_requests{state="running"}') === 1,
      );
      expect(await server.stop()).toBe(0);
      expect((await long).status).toBe(200);
    } finally {
      await server.stop();
    }
  });
});

describe('a misbehaving KV compression plug-in fails only its own requests (real process)', () => {
  it('select throws: its request fails, a built-in request in the same step completes', async () => {
    const policy = await module(
      'select-throws.mjs',
      compressionModule('keep-last', "throw new Error('select bug');"),
    );
    const server = await startServer([...cpu, '--kv-compression', policy]);
    try {
      const [mine, builtin] = await Promise.all([
        complete(server, { prompt: prompt(1, 40), max_tokens: 40 }),
        complete(server, {
          prompt: prompt(2, 40),
          max_tokens: 40,
          kv_compression: { policy: 'window', window: 64 },
        }),
      ]);
      expect(mine.status).toBe(500);
      expect(builtin.status).toBe(200);
      expect(builtin.body.choices![0]!.text.length).toBeGreaterThan(0);
      expect((await health(server)).status).toBe('ok');
      expect(await usedBlocks(server)).toBe(0);
      expect(await failures(server, 'kv-compression:keep-last')).toBe(1);
      expect(server.output()).toMatch(/keep-last threw from select: select bug/);
    } finally {
      expect(await server.stop()).toBe(0);
    }
  });

  it('select taking 1.5 s: the plug-in is disabled after one call, built-ins go on', async () => {
    const policy = await module('slow-select.mjs', compressionModule('slow', busy(1500)));
    const server = await startServer([...cpu, '--kv-compression', policy]);
    try {
      const t = performance.now();
      expect((await complete(server, { prompt: prompt(1, 40), max_tokens: 40 })).status).toBe(500);
      // Once: a 40-token generation would otherwise take 40 calls, a minute.
      expect(performance.now() - t).toBeLessThan(15_000);
      const again = await complete(server, { prompt: prompt(2, 40), max_tokens: 8 });
      expect(again.status).toBe(500);
      const builtin = await complete(server, {
        prompt: prompt(3, 40),
        max_tokens: 8,
        kv_compression: { policy: 'window', window: 64 },
      });
      expect(builtin.status).toBe(200);
      expect(server.output()).toMatch(/select took \d+ ms, over the 250 ms budget/);
      expect((await health(server)).status).toBe('ok');
    } finally {
      expect(await server.stop()).toBe(0);
    }
  });
});

interface Run {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs the built CLI to its end (killed, code null, after `timeoutMs`). */
function kvasir(args: readonly string[], timeoutMs = 60_000): Promise<Run> {
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
          stderr,
        });
      },
    );
  });
}

const random = ['--backend', 'cpu', '--cache-dir', CACHE_DIR, '--model', 'random'];

function expectRefusal(run: Run, code: string, ...mentions: RegExp[]): void {
  expect(run.code, run.stderr).toBe(1);
  expect(run.stderr).toContain(`[${code}]`);
  expect(run.stderr).not.toMatch(/^ {4}at /m);
  for (const m of mentions) expect(run.stderr).toMatch(m);
}

describe('start-up refuses broken plug-ins and settings by name (built CLI)', () => {
  it('a compression plug-in named like a built-in is refused, not shadowing it', async () => {
    const path = await module('window.mjs', compressionModule('window', ''));
    const run = await kvasir(['serve', ...random, '--port', '0', '--kv-compression', path]);
    expectRefusal(run, 'POLICY_LOAD', /named like the built-in policy window/);
  });

  it('a plug-in whose top-level await never settles ends serve with a timeout error', async () => {
    const path = await module('never.mjs', `await new Promise(() => {});\n${evictionModule('')}`);
    const run = await kvasir(['serve', ...random, '--port', '0', '--eviction-policy', path]);
    expectRefusal(run, 'POLICY_LOAD', /did not finish loading within 5 s/, /never\.mjs/);
  });

  it('a maxBlocks that throws at start-up is a typed error naming the plug-in', async () => {
    const path = await module(
      'max-throws.mjs',
      compressionModule('bad-max', '').replace(
        'maxBlocks: () => 4,',
        "maxBlocks() { throw new Error('no budget'); },",
      ),
    );
    const run = await kvasir(['serve', ...random, '--port', '0', '--kv-compression', path]);
    expectRefusal(run, 'POLICY_LOAD', /policy bad-max\) threw from maxBlocks\(16\): no budget/);
  });

  it('info -c refuses the compression settings serve refuses', async () => {
    const file = join(dir, 'bad-kvc.json');
    await writeFile(file, JSON.stringify({ kvCompression: 'sinks:sinks=4' }));
    const info = await kvasir(['info', ...random, '-c', file]);
    expectRefusal(info, 'INVALID_CONFIG', /"kvCompression" in config file/, /window/);
    const flag = await kvasir(['info', ...random, '--kv-compression', 'h2o:budget=16']);
    expectRefusal(flag, 'INVALID_CONFIG', /--kv-compression/, /2 blocks/);
  });

  it('a config file with a UTF-8 byte-order mark is read', async () => {
    const file = join(dir, 'bom.json');
    await writeFile(file, `\uFEFF${JSON.stringify({ maxNumSeqs: 3 })}`);
    const run = await kvasir(['info', ...random, '-c', file, '--json']);
    expect(run.code, run.stderr).toBe(0);
  });

  it('--threads beyond the CPUs is capped, saying so', async () => {
    const cpus = availableParallelism();
    const run = await kvasir([
      'info',
      '--backend',
      'wasm',
      '--cache-dir',
      CACHE_DIR,
      '--model',
      'random',
      '--threads',
      '256',
    ]);
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout).toContain(
      `wasm (${cpus} threads (--threads 256 capped to this machine's ${cpus} CPUs)`,
    );
  });

  it('--num-gpu-blocks beyond what one buffer per layer holds is refused, not cut', async () => {
    const run = await kvasir(['info', ...random, '--num-gpu-blocks', '1e15']);
    expectRefusal(run, 'INVALID_CONFIG', /--num-gpu-blocks: 1000000000000000 blocks do not fit/);
  });
});
