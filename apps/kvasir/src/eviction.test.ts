import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { KvCacheManager } from '@kvasir/kv-allocator';
import { describe, expect, it } from 'vitest';
import { KvasirAppError } from './errors.js';
import { loadEvictionPolicy } from './eviction.js';

const MRU_MODULE = `
export default function createPolicy() {
  const order = [];
  return {
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
    const policy = await loadEvictionPolicy('mru.mjs', dir);
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

  it('explains a module that exports no policy', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'kvasir-policy-'));
    await writeFile(join(dir, 'bad.mjs'), 'export default { insert() {} };\n');
    await expect(loadEvictionPolicy('bad.mjs', dir)).rejects.toSatisfy(
      (e: unknown) =>
        KvasirAppError.isInstance(e) && e.code === 'POLICY_LOAD' && /touch/.test(e.message),
    );
    await expect(loadEvictionPolicy('missing.mjs', dir)).rejects.toSatisfy(
      (e: unknown) => KvasirAppError.isInstance(e) && e.code === 'POLICY_LOAD',
    );
  });
});
