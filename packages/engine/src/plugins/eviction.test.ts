import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { KvCacheManager } from '@kvasir/kv-allocator';
import { describe, expect, it } from 'vitest';
import { KvasirEngineError } from '../errors.js';
import { loadEvictionPolicy } from './eviction.js';
import type { PluginSource } from './plugin-loader.js';

/** Module names relative to `dir`, as the app's Node source resolves them against its cwd. */
const inDir = (dir: string): PluginSource => ({
  resolve: (name) => join(dir, name),
  import: (path) => import(pathToFileURL(path).href),
});

const MRU_MODULE = `
export default function createPolicy() {
  const order = [];
  return {
    specificationVersion: 'v1',
    name: 'mru',
    insert(k) { order.push(k); },
    touch(k) { const i = order.indexOf(k); if (i >= 0) { order.splice(i, 1); order.push(k); } },
    remove(k) { const i = order.indexOf(k); if (i >= 0) order.splice(i, 1); },
    chooseVictim() { return order.at(-1); },
  };
}
`;

describe('loadEvictionPolicy', () => {
  it('returns the built-in policies by name', async () => {
    for (const name of ['lru', 'lfu', 'fifo']) {
      const p = await loadEvictionPolicy(name);
      expect(typeof p.chooseVictim).toBe('function');
    }
  });

  it('loads a user module and the allocator evicts by it', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'kvasir-policy-'));
    await writeFile(join(dir, 'mru.mjs'), MRU_MODULE);
    const policy = await loadEvictionPolicy('mru.mjs', inDir(dir));
    expect(policy.name).toBe('mru');
    // Two cached prefixes; a third request needs one block reclaimed: MRU gives up the newest.
    const kv = new KvCacheManager({ numBlocks: 2, blockSize: 2, evictionPolicy: policy });
    kv.allocateSlots('a', [1, 2]);
    kv.free('a');
    kv.allocateSlots('b', [3, 4]);
    kv.free('b');
    kv.allocateSlots('c', [5, 6]);
    expect(kv.findCachedPrefix([1, 2, 9]).numTokens).toBe(2);
    expect(kv.findCachedPrefix([3, 4, 9]).numTokens).toBe(0);
  });

  it('loads a module written with defineEvictionPolicy, exported as an instance', async () => {
    // Inside the app's folder, so the module resolves @kvasir/kv-allocator as a user's would.
    const dir = await mkdtemp(join(fileURLToPath(new URL('..', import.meta.url)), '.policy.tmp.'));
    try {
      await writeFile(
        join(dir, 'newest.mjs'),
        `import { defineEvictionPolicy } from '@kvasir/kv-allocator';
const keys = new Set();
export default defineEvictionPolicy({
  name: 'newest',
  insert: (k) => keys.add(k),
  touch: () => {},
  remove: (k) => keys.delete(k),
  chooseVictim: () => [...keys].at(-1),
});
`,
      );
      const policy = await loadEvictionPolicy('newest.mjs', inDir(dir));
      expect(policy.name).toBe('newest');
      expect(policy.specificationVersion).toBe('v1');
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('refuses a class, an unversioned object and a future version, saying what to export', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'kvasir-policy-'));
    const cases: [string, string, RegExp][] = [
      [
        'class.mjs',
        "export default class Mru { constructor() { this.specificationVersion = 'v1'; } }",
        /exports a class; export an instance or a factory such as \(\) => new Mru\(\)/,
      ],
      [
        'plain.mjs',
        "export default { name: 'p', insert() {}, touch() {}, remove() {}, chooseVictim() {} };",
        /defineEvictionPolicy/,
      ],
      [
        'future.mjs',
        "export default { specificationVersion: 'v9', name: 'f', insert() {}, touch() {}, remove() {}, chooseVictim() {} };",
        /"v9" is not supported/,
      ],
      ['none.mjs', 'export const x = 1;', /has no default export/],
    ];
    for (const [file, source, message] of cases) {
      await writeFile(join(dir, file), source);
      await expect(loadEvictionPolicy(file, inDir(dir))).rejects.toSatisfy(
        (e: unknown) =>
          KvasirEngineError.isInstance(e) && e.code === 'POLICY_LOAD' && message.test(e.message),
      );
    }
  });

  it('explains a module that exports no policy', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'kvasir-policy-'));
    await writeFile(
      join(dir, 'bad.mjs'),
      "export default { specificationVersion: 'v1', name: 'bad', insert() {} };\n",
    );
    await expect(loadEvictionPolicy('bad.mjs', inDir(dir))).rejects.toSatisfy(
      (e: unknown) =>
        KvasirEngineError.isInstance(e) && e.code === 'POLICY_LOAD' && /touch/.test(e.message),
    );
    await expect(loadEvictionPolicy('missing.mjs', inDir(dir))).rejects.toSatisfy(
      (e: unknown) =>
        KvasirEngineError.isInstance(e) &&
        e.code === 'POLICY_LOAD' &&
        /expected lru, lfu, fifo or a path/.test(e.message),
    );
  });
});
