import { spawn } from 'node:child_process';
import { mkdtemp, readdir, readFile, rm, stat, truncate, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type BlockHash, defineEvictionPolicy, FifoPolicy, LfuPolicy } from '@kvasir/kv-allocator';
import fc from 'fast-check';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { DiskStore } from './disk-store.js';
import { encodeFrame, encodeFrameHeader } from './frame.js';
import { block, key, NS, OTHER_NS, sameBytes, VERSION_1_FRAME } from './testing/fixtures.js';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kvasir-disk-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function exists(path: string): Promise<boolean> {
  return stat(path).then(
    () => true,
    () => false,
  );
}

async function allFiles(root: string): Promise<string[]> {
  const out: string[] = [];
  for (const e of await readdir(root, { withFileTypes: true, recursive: true })) {
    if (e.isFile()) out.push(e.name);
  }
  return out;
}

describe('DiskStore', () => {
  // The KvBlockStore contract (round trips, prefixes, misuse, closing) is checked by
  // conformance/stores.conformance.test.ts; what follows is this store's own.
  it('leaves no temporary files and counts its entries', async () => {
    const s = await DiskStore.open({ namespace: NS, dir, maxBytes: 1 << 20 });
    const entries = [0, 1, 2].map((i) => ({ key: key(i), value: block(i, 3000 + i) }));
    expect(await s.putMany(entries)).toBe(3);
    expect((await allFiles(dir)).filter((f) => f.endsWith('.tmp'))).toEqual([]);
    expect(s.stats()).toMatchObject({ puts: 3, entries: 3 });
  });

  it('returns each block in an allocation of exactly its own size', async () => {
    const s = await DiskStore.open({ namespace: NS, dir, maxBytes: 1 << 20 });
    const sizes = [1, 63, 64, 65, 5000];
    await s.putMany(sizes.map((n, i) => ({ key: key(i), value: block(i, n) })));
    const got = await s.getMany(sizes.map((_, i) => key(i)));
    got.forEach((v, i) => {
      expect(sameBytes(v, block(i, sizes[i]))).toBe(true);
      expect(v?.byteOffset).toBe(0);
      expect(v?.buffer.byteLength).toBe(sizes[i]);
    });
  });

  it('round-trips with fsync on', async () => {
    const s = await DiskStore.open({ namespace: NS, dir, maxBytes: 1 << 20, fsync: true });
    expect(await s.putMany([{ key: key(1), value: block(1, 4000) }])).toBe(1);
    expect(sameBytes((await s.getMany([key(1)]))[0], block(1, 4000))).toBe(true);
  });

  it('keeps the cache across a restart, oldest first in the rebuilt policy', async () => {
    const a = await DiskStore.open({ namespace: NS, dir, maxBytes: 1 << 20 });
    for (let i = 0; i < 4; i++) await a.putMany([{ key: key(i), value: block(i, 1000) }]);
    const size = a.stats().bytes ?? 0;
    await a.close();
    const b = await DiskStore.open({ namespace: NS, dir, maxBytes: 1 << 20 });
    expect(b.stats()).toMatchObject({ entries: 4, bytes: size });
    const got = await b.getMany([0, 1, 2, 3].map(key));
    got.forEach((v, i) => {
      expect(sameBytes(v, block(i, 1000))).toBe(true);
    });
    // Another namespace in the same directory sees none of it.
    const other = await DiskStore.open({ namespace: OTHER_NS, dir, maxBytes: 1 << 20 });
    expect(other.stats().entries).toBe(0);
    expect(await other.getMany([key(0)])).toEqual([undefined]);
    // Reopening with a smaller budget evicts down to it.
    const small = await DiskStore.open({ namespace: NS, dir, maxBytes: Math.ceil(size / 2) });
    expect(small.stats().bytes ?? 0).toBeLessThanOrEqual(Math.ceil(size / 2));
    expect(small.stats().entries).toBeGreaterThan(0);
  });

  it('removes stale temporary files on open but not fresh ones', async () => {
    const a = await DiskStore.open({ namespace: NS, dir, maxBytes: 1 << 20 });
    await a.putMany([{ key: key(1), value: block(1, 100) }]);
    const sub = dirname(a.filePath(key(1)));
    await writeFile(join(sub, `${key(2)}.kvb.123.abc.tmp`), 'partial');
    await DiskStore.open({ namespace: NS, dir, maxBytes: 1 << 20 });
    expect(await exists(join(sub, `${key(2)}.kvb.123.abc.tmp`))).toBe(true);
    const b = await DiskStore.open({ namespace: NS, dir, maxBytes: 1 << 20, staleTempMs: -1 });
    expect(await exists(join(sub, `${key(2)}.kvb.123.abc.tmp`))).toBe(false);
    expect(b.stats().entries).toBe(1);
  });

  it.each([
    ['a flipped payload byte', 'corrupt'],
    ['a flipped header byte', 'corrupt'],
    ['a truncated file', 'corrupt'],
    ['an empty file', 'corrupt'],
    ['a version-1 frame', 'corrupt'],
    ['another namespace\u2019s frame', 'foreign'],
    ['another key\u2019s frame', 'foreign'],
  ] as const)('treats %s as a miss, deletes it and counts it', async (what, counter) => {
    const s = await DiskStore.open({ namespace: NS, dir, maxBytes: 1 << 20 });
    const value = block(7, 2000);
    await s.putMany([{ key: key(7), value }]);
    const path = s.filePath(key(7));
    const bytes = await readFile(path);
    if (what === 'a flipped payload byte') {
      bytes[bytes.length - 100] = (bytes[bytes.length - 100] ?? 0) ^ 1;
      await writeFile(path, bytes);
    } else if (what === 'a flipped header byte') {
      bytes[5] = (bytes[5] ?? 0) ^ 0x20;
      await writeFile(path, bytes);
    } else if (what === 'a truncated file') {
      await truncate(path, bytes.length - 1);
    } else if (what === 'an empty file') {
      await truncate(path, 0);
    } else if (what === 'a version-1 frame') {
      await writeFile(path, Buffer.from(VERSION_1_FRAME, 'hex'));
    } else if (what === 'another namespace\u2019s frame') {
      await writeFile(path, encodeFrame(OTHER_NS, key(7), value));
    } else {
      await writeFile(path, encodeFrame(NS, key(8), value));
    }
    expect(await s.getMany([key(7)])).toEqual([undefined]);
    expect(await exists(path)).toBe(false);
    expect(s.stats()[counter]).toBe(1);
    expect(s.stats().entries).toBe(0);
    // A fresh write works again.
    await s.putMany([{ key: key(7), value }]);
    expect(sameBytes((await s.getMany([key(7)]))[0], value)).toBe(true);
  });

  describe('getManyInto', () => {
    it('reads blocks into views of one staging buffer, misses and blocks of another length left false', async () => {
      const s = await DiskStore.open({ namespace: NS, dir, maxBytes: 1 << 20 });
      const entries = [0, 1, 2].map((i) => ({ key: key(i), value: block(i, 3000) }));
      await s.putMany([...entries, { key: key(5), value: block(5, 2999) }]);
      const slab = new Uint8Array(5 * 3000).fill(0xee);
      const targets = [0, 1, 2, 3, 4].map((i) => slab.subarray(i * 3000, (i + 1) * 3000));
      const got = await s.getManyInto([key(2), key(9), key(0), key(5), key(1)], targets);
      expect(got).toEqual([true, false, true, false, true]);
      expect(sameBytes(targets[0], entries[2]?.value)).toBe(true);
      expect(sameBytes(targets[2], entries[0]?.value)).toBe(true);
      expect(sameBytes(targets[4], entries[1]?.value)).toBe(true);
      // The block of another length stays stored, for a reader with the right target.
      expect(sameBytes((await s.getMany([key(5)]))[0], block(5, 2999))).toBe(true);
      expect(s.stats()).toMatchObject({ hits: 4, misses: 2, corrupt: 0, entries: 4 });
    });

    it('treats a flipped payload byte as a miss and deletes the file, as getMany does', async () => {
      const s = await DiskStore.open({ namespace: NS, dir, maxBytes: 1 << 20 });
      await s.putMany([{ key: key(7), value: block(7, 2000) }]);
      const path = s.filePath(key(7));
      const bytes = await readFile(path);
      bytes[bytes.length - 1] = (bytes[bytes.length - 1] ?? 0) ^ 1;
      await writeFile(path, bytes);
      expect(await s.getManyInto([key(7)], [new Uint8Array(2000)])).toEqual([false]);
      expect(await exists(path)).toBe(false);
      expect(s.stats()).toMatchObject({ corrupt: 1, misses: 1, entries: 0 });
    });

    it('agrees with getMany on random blocks, with checksum workers on (property)', async () => {
      const s = await DiskStore.open({
        namespace: NS,
        dir,
        maxBytes: 1 << 24,
        checksumThreads: 2,
        checksumMinBytes: 1,
      });
      await fc.assert(
        fc.asyncProperty(
          fc.array(
            fc.record({
              id: fc.integer({ min: 0, max: 30 }),
              len: fc.integer({ min: 1, max: 70_000 }),
            }),
            {
              minLength: 1,
              maxLength: 6,
            },
          ),
          async (blocks) => {
            await s.delete(blocks.map((b) => key(b.id)));
            const stored = new Map(blocks.map((b) => [b.id, block(b.id, b.len)]));
            await s.putMany([...stored].map(([id, value]) => ({ key: key(id), value })));
            const keys = [...stored.keys()].map(key);
            const viaGet = await s.getMany(keys);
            const targets = [...stored.values()].map((v) => new Uint8Array(v.byteLength));
            const viaInto = await s.getManyInto(keys, targets);
            expect(viaInto.every(Boolean)).toBe(true);
            expect(targets.every((t, i) => sameBytes(t, viaGet[i]))).toBe(true);
          },
        ),
        { numRuns: 15, seed: 77 },
      );
      await s.close();
    });

    it('refuses targets that are not one Uint8Array per key', async () => {
      const s = await DiskStore.open({ namespace: NS, dir, maxBytes: 1 << 20 });
      await expect(s.getManyInto([key(1), key(2)], [new Uint8Array(4)])).rejects.toMatchObject({
        code: 'INVALID_VALUE',
      });
      const notBytes = [new Float32Array(4)] as unknown as Uint8Array[];
      await expect(s.getManyInto([key(1)], notBytes)).rejects.toMatchObject({
        code: 'INVALID_VALUE',
      });
      await expect(s.getManyInto(['nope'], [new Uint8Array(4)])).rejects.toMatchObject({
        code: 'INVALID_KEY',
      });
      expect(s.stats()).toMatchObject({ hits: 0, misses: 0 });
    });
  });

  it('makes a failed write invisible and counts it', async () => {
    const s = await DiskStore.open({ namespace: NS, dir, maxBytes: 1 << 20 });
    // A regular file where the block's subdirectory should be: every write there fails.
    await writeFile(dirname(s.filePath(key(1))), 'in the way');
    expect(await s.putMany([{ key: key(1), value: block(1, 100) }])).toBe(0);
    expect(s.stats()).toMatchObject({ errors: 1, puts: 0, entries: 0, bytes: 0 });
    expect(await s.getMany([key(1)])).toEqual([undefined]);
  });

  it('follows the policy (LRU) and never exceeds the budget (property)', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.tuple(fc.boolean(), fc.integer({ min: 0, max: 7 })), {
          minLength: 1,
          maxLength: 25,
        }),
        async (ops) => {
          const sub = await mkdtemp(join(dir, 'p-'));
          // Headers differ by a byte or two (msgpack packs the CRC in as few bytes as it can).
          const frameSize = Math.max(
            ...[0, 1, 2, 3, 4, 5, 6, 7].map(
              (k) => encodeFrameHeader(NS, key(k), block(k, 600)).byteLength + 600,
            ),
          );
          const s = await DiskStore.open({ namespace: NS, dir: sub, maxBytes: 3 * frameSize });
          const model: number[] = []; // least recently used first
          for (const [isPut, k] of ops) {
            if (isPut) {
              await s.putMany([{ key: key(k), value: block(k, 600) }]);
              const at = model.indexOf(k);
              if (at >= 0) model.splice(at, 1);
              model.push(k);
              if (model.length > 3) model.shift();
            } else {
              const [v] = await s.getMany([key(k)]);
              const at = model.indexOf(k);
              if ((v !== undefined) !== at >= 0) return false;
              if (at >= 0) model.push(...model.splice(at, 1));
            }
            if ((s.stats().bytes ?? 0) > 3 * frameSize) return false;
            if (JSON.stringify(s.keys().sort()) !== JSON.stringify(model.map(key).sort()))
              return false;
          }
          const onDisk = (await allFiles(sub)).filter((f) => f.endsWith('.kvb')).sort();
          return (
            JSON.stringify(onDisk) === JSON.stringify(model.map((k) => `${key(k)}.kvb`).sort())
          );
        },
      ),
      { numRuns: 25 },
    );
  });

  it('evicts exactly the victims a plugged-in policy chooses (FIFO, LFU)', async () => {
    for (const make of [() => new FifoPolicy<BlockHash>(), () => new LfuPolicy<BlockHash>()]) {
      const inner = make();
      const chosen: BlockHash[] = [];
      const spy = defineEvictionPolicy<BlockHash>({
        name: 'spy',
        insert: (k) => inner.insert(k),
        touch: (k) => inner.touch(k),
        remove: (k) => inner.remove(k),
        chooseVictim: () => {
          const v = inner.chooseVictim();
          if (v !== undefined) chosen.push(v);
          return v;
        },
      });
      const sub = await mkdtemp(join(dir, 'pol-'));
      const frame = encodeFrameHeader(NS, key(0), block(0, 500)).byteLength + 500;
      const s = await DiskStore.open({
        namespace: NS,
        dir: sub,
        maxBytes: 3 * frame + 8,
        policy: spy,
      });
      const evicted: BlockHash[] = [];
      s.onEvict((k) => evicted.push(k));
      for (const k of [0, 1, 2]) await s.putMany([{ key: key(k), value: block(k, 500) }]);
      await s.getMany([key(0), key(0), key(1)]); // uses: 0 three times, 1 twice, 2 once
      for (const k of [3, 4]) await s.putMany([{ key: key(k), value: block(k, 500) }]);
      expect(evicted).toEqual(chosen);
      expect(evicted.length).toBe(2);
      const remaining = s.keys().sort();
      // FIFO drops the two oldest; LFU drops 2 (one use), then 3 (new, one use) before 0 and 1.
      const expected = (inner.name === 'fifo' ? [2, 3, 4] : [0, 1, 4]).map(key).sort();
      expect(remaining).toEqual(expected);
      for (const k of evicted) expect(await exists(s.filePath(k))).toBe(false);
    }
  });

  it('shares a directory with another process: appearing and vanishing files', async () => {
    const a = await DiskStore.open({ namespace: NS, dir, maxBytes: 1 << 20 });
    const b = await DiskStore.open({ namespace: NS, dir, maxBytes: 1 << 20 });
    await a.putMany([{ key: key(1), value: block(1, 500) }]);
    expect(b.stats().entries).toBe(0);
    expect(await b.countPrefix([key(1)])).toBe(1);
    expect(sameBytes((await b.getMany([key(1)]))[0], block(1, 500))).toBe(true);
    expect(b.stats().entries).toBe(1); // adopted into b's index and budget
    await a.delete([key(1)]);
    expect(await b.has(key(1))).toBe(false);
    expect(await b.getMany([key(1)])).toEqual([undefined]);
    expect(b.stats().entries).toBe(0);
  });

  it('never returns a torn value while two stores write the same key concurrently', async () => {
    const a = await DiskStore.open({ namespace: NS, dir, maxBytes: 64 << 20 });
    const b = await DiskStore.open({ namespace: NS, dir, maxBytes: 64 << 20 });
    const k = key('shared');
    const v1 = block(1, 256 * 1024);
    const v2 = block(2, 256 * 1024);
    await a.putMany([{ key: k, value: v1 }]);
    let reads = 0;
    for (let round = 0; round < 30; round++) {
      const [, , r1, r2] = await Promise.all([
        a.putMany([{ key: k, value: round % 2 ? v1 : v2 }]),
        b.putMany([{ key: k, value: round % 2 ? v2 : v1 }]),
        a.getMany([k]),
        b.getMany([k]),
      ]);
      for (const [v] of [r1, r2]) {
        expect(v !== undefined).toBe(true); // a complete file is always in place
        expect(sameBytes(v, v1) || sameBytes(v, v2)).toBe(true);
        reads++;
      }
    }
    expect(reads).toBe(60);
    expect(a.stats().corrupt + b.stats().corrupt).toBe(0);
  });
});

describe('DiskStore shared by two processes', () => {
  it('never shows a torn or foreign value while another process rewrites the key', async () => {
    const k = key('cross-process');
    const v1 = block(1, 256 * 1024);
    const v2 = block(2, 256 * 1024);
    const reader = await DiskStore.open({ namespace: NS, dir, maxBytes: 64 << 20 });
    const script = fileURLToPath(new URL('./testing/disk-writer.fixture.ts', import.meta.url));
    const child = spawn(process.execPath, ['--import', 'tsx', script, dir, NS, k, '150'], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString();
    });
    child.stderr.on('data', (d: Buffer) => {
      out += d.toString();
    });
    const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
    let running = true;
    void exited.then(() => {
      running = false;
    });
    let reads = 0;
    let seen = 0;
    do {
      const [v] = await reader.getMany([k]);
      reads++;
      if (v !== undefined) {
        seen++;
        expect(sameBytes(v, v1) || sameBytes(v, v2)).toBe(true);
      } else {
        // Once a complete file is in place, a rename only ever swaps it for another one.
        expect(seen).toBe(0);
      }
    } while (running);
    expect(await exited).toBe(0);
    expect(out).toContain('wrote 150');
    expect(reads).toBeGreaterThan(0);
    expect(reader.stats().corrupt + reader.stats().foreign).toBe(0);
    const [last] = await reader.getMany([k]);
    expect(sameBytes(last, v1)).toBe(true); // round 149 wrote v1
  });
});
