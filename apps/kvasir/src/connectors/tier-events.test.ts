import type { BlockHash } from '@kvasir/kv-allocator';
import { HostMemoryStore, kvNamespace, TieredStore } from '@kvasir/offload';
import { describe, expect, it } from 'vitest';
import { AnnouncingStore } from './tier-events.js';

const namespace = kvNamespace({
  modelId: 'm',
  weightDigest: 'sha256:00',
  kvDtype: 'f32',
  blockSize: 16,
  numLayers: 1,
  numKvHeads: 1,
  headDim: 4,
});
const key = (i: number) => i.toString(16).padStart(32, '0');

describe('AnnouncingStore over a real host tier', () => {
  it('reports what the tier stores, evicts, deletes and cannot return, and still demotes through TieredStore', async () => {
    const log: string[] = [];
    const sink = {
      tierStored: (m: string, hs: readonly BlockHash[]) =>
        log.push(`+${m} ${hs.map((h) => Number.parseInt(h, 16)).join(',')}`),
      tierRemoved: (m: string, hs: readonly BlockHash[]) =>
        log.push(`-${m} ${hs.map((h) => Number.parseInt(h, 16)).join(',')}`),
    };
    // Room for two 1 KiB blocks: the third evicts the least recently used.
    const host = new AnnouncingStore(
      new HostMemoryStore({ namespace, maxBytes: 2 * 1024 + 512 }),
      'CPU',
      sink,
    );
    const below = new HostMemoryStore({ namespace, maxBytes: 1 << 20 });
    const tiered = new TieredStore({ tiers: [host, below], writeMode: 'write-back' });
    const value = () => new Uint8Array(1024).fill(7);
    await tiered.putMany([{ key: key(1), value: value() }]);
    await tiered.putMany([{ key: key(2), value: value() }]);
    await tiered.putMany([{ key: key(3), value: value() }]);
    await tiered.drain();
    expect(log).toEqual(['+CPU 1', '+CPU 2', '-CPU 1', '+CPU 3']);
    // The evicted block was demoted below (the wrapper kept the eviction source).
    expect(await below.has(key(1))).toBe(true);
    log.length = 0;
    expect((await host.getMany([key(9), key(2)]))[1]).toBeDefined();
    await host.delete([key(3)]);
    expect(log).toEqual(['-CPU 9', '-CPU 3']);
    await tiered.close();
  });
});
