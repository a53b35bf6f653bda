import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RANDOM_MODEL_NAME } from '../src/default-model.js';
import { API_KEY, CACHE_DIR, CLI, eventually, type ServerProcess, startServer } from './harness.js';

// Users' KV connectors loaded from module files by real `kvasir serve` processes
// (`--kv-connector`, the config file's `kvConnectors`): one that shares prefix blocks through a
// directory, so a second replica answers with prompt tokens the connector brought, and broken
// ones, which cost a request nothing but the connector's help.

let dir: string;
const BLOCK = 16;
const cpu = ['--backend', 'cpu', '--block-size', String(BLOCK)];

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kvasir-connector-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

/**
 * A v1 connector written as a user would, with no dependency: every full block a step computes
 * is written to `<store>/<block hash>` after the forward pass; at admission, the prompt's
 * blocks beyond the local prefix found there are imported between steps (reserveExternal, the
 * bytes written to the device, commitExternal), and onAdmit resolves to their tokens.
 */
const directoryConnector = (store: string) => `
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
const store = ${JSON.stringify(store)};
export default (ctx) => {
  const bs = ctx.kvCache.blockSize;
  const writes = new Set();
  let imports = [];
  return {
    specificationVersion: 'v1',
    name: 'directory',
    get hasPendingWork() { return imports.length > 0; },
    afterForward(step) {
      const blocks = [];
      const keys = [];
      for (const row of step.rows) {
        const first = row.contextLen - row.queryLen;
        for (let j = Math.floor(first / bs); (j + 1) * bs <= row.contextLen; j++) {
          const hash = ctx.kvCache.blocks.hashOf(row.blockTable[j]);
          if (hash === undefined || existsSync(join(store, hash))) continue;
          blocks.push(row.blockTable[j]);
          keys.push(hash);
        }
      }
      if (blocks.length === 0) return;
      const write = ctx.device.readBlocks(blocks).then((data) => {
        data.forEach((bytes, i) => writeFileSync(join(store, keys[i]), bytes));
      });
      writes.add(write);
      write.finally(() => writes.delete(write));
    },
    async onAdmit({ promptTokens }) {
      const usable = Math.floor((promptTokens.length - 1) / bs);
      const hashes = ctx.kvCache.blockHashes(promptTokens, ctx.extraKeys).slice(0, usable);
      const local = ctx.kvCache.findCachedPrefix(promptTokens, ctx.extraKeys, { record: false });
      let end = local.blocks.length;
      while (end < hashes.length && existsSync(join(store, hashes[end]))) end++;
      if (end === local.blocks.length) return 0;
      return new Promise((done) => {
        imports.push({ tokens: promptTokens.slice(0, end * bs), count: end - local.blocks.length, done });
        ctx.wake();
      });
    },
    async betweenSteps() {
      const jobs = imports;
      imports = [];
      for (const job of jobs) {
        const reserved = ctx.kvCache.reserveExternal(job.tokens, { extraKeys: ctx.extraKeys, maxBlocks: job.count });
        if (!reserved) { job.done(0); continue; }
        try {
          const data = reserved.hashes.map((h) => new Uint8Array(readFileSync(join(store, h))));
          await ctx.device.writeBlocks(reserved.blocks, data);
          ctx.kvCache.commitExternal(reserved);
          job.done(reserved.blocks.length * bs);
        } catch {
          ctx.kvCache.abortExternal(reserved);
          job.done(0);
        }
      }
    },
    async close() {
      for (const job of imports) job.done(0);
      imports = [];
      await Promise.all([...writes]);
    },
  };
};
`;

async function module(name: string, source: string): Promise<string> {
  const path = join(dir, name);
  await writeFile(path, source);
  return path;
}

interface Answer {
  readonly status: number;
  readonly text: string;
  readonly cachedTokens: number;
}

/** A greedy completion of `prompt` (token ids): replicas with the same weights agree. */
async function complete(server: ServerProcess, prompt: number[]): Promise<Answer> {
  const res = await fetch(`${server.url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${API_KEY}` },
    body: JSON.stringify({
      model: RANDOM_MODEL_NAME,
      prompt,
      max_tokens: 8,
      temperature: 0,
      ignore_eos: true,
    }),
  });
  const body = (await res.json()) as {
    choices?: { text: string }[];
    usage?: { prompt_tokens_details?: { cached_tokens?: number } };
  };
  return {
    status: res.status,
    text: body.choices?.[0]?.text ?? '',
    cachedTokens: body.usage?.prompt_tokens_details?.cached_tokens ?? 0,
  };
}

const prompt = (seed: number, len = 6 * BLOCK + 5) =>
  Array.from({ length: len }, (_, j) => 3 + ((seed * 131 + j * 17) % 480));

describe('a KV connector module loaded from the CLI (real processes)', () => {
  it('shares prefix blocks between two replicas: the second answers with tokens it brought', async () => {
    const store = join(dir, 'store');
    await mkdir(store);
    const path = await module('directory.mjs', directoryConnector(store));
    // A by the flag, B by the config file's key: both load the same module.
    const config = join(dir, 'connector.json');
    await writeFile(config, JSON.stringify({ kvConnectors: [path] }));
    // No offload tier: whatever B's cache holds of the prompt, the connector brought.
    const own = [...cpu, '--offload-host-bytes', '0'];
    const a = await startServer([...own, '--kv-connector', path]);
    const b = await startServer([...own, '--config', config]);
    try {
      expect(a.output()).toMatch(/ {2}connectors +directory\n/);
      expect(b.output()).toMatch(/ {2}connectors +directory\n/);
      const p = prompt(1);
      const first = await complete(a, p);
      expect(first.status).toBe(200);
      expect(first.cachedTokens).toBe(0);
      const fullBlocks = Math.floor((p.length - 1) / BLOCK);
      expect(await eventually(async () => (await readdir(store)).length >= fullBlocks)).toBe(true);
      const second = await complete(b, p);
      expect(second.status).toBe(200);
      // B never computed this prompt: its prefix cache held nothing the connector did not bring.
      expect(second.cachedTokens).toBe(fullBlocks * BLOCK);
      expect(second.text).toBe(first.text);
    } finally {
      await Promise.all([a.stop(), b.stop()]);
    }
  });

  it('an onAdmit that throws or returns nonsense is a miss, logged once and counted', async () => {
    const path = await module(
      'broken-admit.mjs',
      `let calls = 0;
export default {
  specificationVersion: 'v1',
  name: 'broken',
  async onAdmit() {
    calls++;
    if (calls % 2 === 1) throw new Error('store is down');
    return 'lots';
  },
  async close() {},
};
`,
    );
    const server = await startServer([...cpu, '--kv-connector', path]);
    try {
      for (let i = 0; i < 3; i++) {
        const answer = await complete(server, prompt(10 + i, 20));
        expect(answer.status).toBe(200);
        expect(answer.text.length).toBeGreaterThan(0);
      }
      const failures = (await server.metrics()).get(
        'kvasir_plugin_failures_total{plugin="kv-connector:broken"}',
      );
      expect(failures).toBe(3);
      const said = server.output().match(/plug-in kv-connector:broken failed/g) ?? [];
      expect(said).toHaveLength(1);
      expect(server.output()).toMatch(/onAdmit threw: store is down/);
    } finally {
      await server.stop();
    }
  });
});

interface Run {
  readonly code: number | null;
  readonly stderr: string;
}

function serve(args: readonly string[]): Promise<Run> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [CLI, 'serve', '--port', '0', '--cache-dir', CACHE_DIR, '--model', 'random', ...cpu, ...args],
      { timeout: 60_000, killSignal: 'SIGKILL', env: { ...process.env, KVASIR_API_KEY: '' } },
      (error, _stdout, stderr) => {
        const killed = (error as { killed?: boolean } | null)?.killed === true;
        resolve({
          code: killed ? null : error ? ((error as { code?: number }).code ?? 1) : 0,
          stderr,
        });
      },
    );
  });
}

describe('start-up refuses a broken KV connector module by name (built CLI)', () => {
  it.each([
    [
      'no-version.mjs',
      "export default { name: 'x', close: async () => {} };",
      /no specificationVersion/,
    ],
    [
      'factory-throws.mjs',
      "export default () => { throw new Error('no store configured'); };",
      /threw from its factory: no store configured/,
    ],
    ['nothing.mjs', 'export const x = 1;', /has no default export/],
  ])('%s', async (name, source, why) => {
    const path = await module(name, source);
    const run = await serve(['--kv-connector', path]);
    expect(run.code, run.stderr).toBe(1);
    expect(run.stderr).toContain('[POLICY_LOAD]');
    expect(run.stderr).toContain(name);
    expect(run.stderr).toMatch(why);
    expect(run.stderr).not.toMatch(/^ {4}at /m);
  });
});
