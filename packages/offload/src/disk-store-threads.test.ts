import { mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  autoChecksumThreads,
  CHECKSUM_WORKER_SOURCE,
  type Checksummer,
  ChecksumPool,
  GIVE_UP_AFTER,
} from './checksum-pool.js';
import { DiskStore } from './disk-store.js';
import type { DiskStoreOptions } from './disk-store-options.js';
import { decodeFrameHeader, FRAME_HEADER_BYTES } from './frame.js';
import { block, key, NS, sameBytes } from './testing/fixtures.js';
import { xxh64 } from './xxh64.js';

// Every test here forces worker threads (`checksumThreads: 2`), so the parallel path runs on a
// machine of two cores too, where 'auto' would hash inline.

let dir: string;
const open: DiskStore[] = [];
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kvasir-disk-threads-'));
});
afterEach(async () => {
  await Promise.all(open.splice(0).map((s) => s.close()));
  await rm(dir, { recursive: true, force: true });
});

async function store(options: Partial<DiskStoreOptions> = {}): Promise<DiskStore> {
  const s = await DiskStore.open({
    namespace: NS,
    dir,
    maxBytes: 64 << 20,
    checksumThreads: 2,
    checksumMinBytes: 1024,
    ...options,
  });
  open.push(s);
  return s;
}

function checksummer(s: DiskStore): Checksummer {
  return (s as unknown as { checksum: Checksummer }).checksum;
}

/** Counts calls to `pool.hashFile` from now on; returns the count so far. */
function countHashFile(pool: ChecksumPool): () => number {
  let calls = 0;
  const real = pool.hashFile.bind(pool);
  pool.hashFile = (...args) => {
    calls++;
    return real(...args);
  };
  return () => calls;
}

async function exists(path: string): Promise<boolean> {
  return stat(path).then(
    () => true,
    () => false,
  );
}

async function tempFiles(root: string): Promise<string[]> {
  const out: string[] = [];
  for (const e of await readdir(root, { withFileTypes: true, recursive: true })) {
    if (e.isFile() && e.name.endsWith('.tmp')) out.push(e.name);
  }
  return out;
}

const CRASHING = CHECKSUM_WORKER_SOURCE.replace(
  "parentPort.on('message', (m) => {",
  "parentPort.on('message', (m) => { process.exit(3);",
);

describe('DiskStore with checksum worker threads', () => {
  it('writes the digests an inline store writes, and each reads the other', async () => {
    const threaded = await store();
    const inline = await store({ checksumThreads: 0 });
    expect(threaded.checksumThreads).toBe(2);
    expect(inline.checksumThreads).toBe(0);
    // Below, at and above checksumMinBytes; beyond the 1 MiB wasm chunk; odd tails.
    const sizes = [1000, 1024, 4097, 300_001, (1 << 20) + 5, 2 << 20];
    const entries = sizes.map((n, i) => ({ key: key(i), value: block(i, n) }));
    expect(await threaded.putMany(entries)).toBe(sizes.length);
    expect(checksummer(threaded).workers?.size).toBeGreaterThan(0);
    for (const e of entries) {
      const header = decodeFrameHeader(
        (await readFile(threaded.filePath(e.key))).subarray(0, FRAME_HEADER_BYTES),
      );
      expect(header?.xxh64).toBe(xxh64(e.value).toString(16).padStart(16, '0'));
    }
    const keys = entries.map((e) => e.key);
    for (const reader of [threaded, inline]) {
      const got = await reader.getMany(keys);
      got.forEach((v, i) => {
        expect(sameBytes(v, entries[i]?.value)).toBe(true);
        // Moved to a worker and back, still an allocation of exactly the block's size.
        expect(v?.byteOffset).toBe(0);
        expect(v?.buffer.byteLength).toBe(sizes[i]);
      });
    }
    // And the other way round: the inline store's files read through the workers.
    await inline.delete(keys);
    await inline.putMany(entries);
    const back = await threaded.getMany(keys);
    back.forEach((v, i) => {
      expect(sameBytes(v, entries[i]?.value)).toBe(true);
    });
    expect(threaded.stats()).toMatchObject({ corrupt: 0, foreign: 0, errors: 0 });
  });

  it('round-trips any bytes through the workers exactly (property)', async () => {
    const s = await store({ checksumMinBytes: 1 });
    let n = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.uint8Array({ minLength: 1, maxLength: 5000 }), { minLength: 1, maxLength: 6 }),
        async (values) => {
          const entries = values.map((value) => ({ key: key(`p${n++}`), value }));
          expect(await s.putMany(entries)).toBe(entries.length);
          const got = await s.getMany(entries.map((e) => e.key));
          got.forEach((v, i) => {
            expect(sameBytes(v, entries[i]?.value)).toBe(true);
          });
        },
      ),
      { numRuns: 25 },
    );
    expect(s.stats()).toMatchObject({ corrupt: 0, errors: 0 });
  });

  it.each([
    ['the first payload byte', 0],
    ['a byte in the middle (hashed on a worker)', 150_000],
    ['a byte of the tail (finished on this thread)', 300_000],
  ] as const)(
    'detects a flip of %s, read or read into a target: a deleted, counted miss',
    async (_, at) => {
      const s = await store();
      const value = block(3, 300_007);
      await s.putMany([
        { key: key(3), value },
        { key: key(4), value },
      ]);
      for (const k of [key(3), key(4)]) {
        const bytes = await readFile(s.filePath(k));
        bytes[FRAME_HEADER_BYTES + at]! ^= 0x10;
        await writeFile(s.filePath(k), bytes);
      }
      const pool = checksummer(s).workers!;
      const fromFiles = countHashFile(pool);
      expect(await s.getMany([key(3)])).toEqual([undefined]);
      expect(fromFiles()).toBe(0); // its own buffer is moved to a worker, not read again
      // Into a caller's target: a worker hashes the same bytes from the open file.
      expect(await s.getManyInto([key(4)], [new Uint8Array(value.byteLength)])).toEqual([false]);
      expect(fromFiles()).toBe(1);
      expect(s.stats()).toMatchObject({ corrupt: 2, misses: 2, errors: 0 });
      expect(await exists(s.filePath(key(3)))).toBe(false);
      expect(await exists(s.filePath(key(4)))).toBe(false);
    },
  );

  it('answers a miss (not corruption) when a worker dies, and stores nothing', async () => {
    const s = await store();
    const value = block(5, 200_000);
    await s.putMany([{ key: key(5), value }]);
    const c = checksummer(s);
    const good = c.workers;
    c.workers = new ChecksumPool(2, CRASHING);
    try {
      expect(await s.getMany([key(5)])).toEqual([undefined]);
      expect(await s.getManyInto([key(5)], [new Uint8Array(value.byteLength)])).toEqual([false]);
      expect(s.stats()).toMatchObject({ errors: 2, corrupt: 0 });
      expect(await exists(s.filePath(key(5)))).toBe(true); // the file is fine: kept
      expect(await s.putMany([{ key: key(6), value }])).toBe(0);
      expect(s.stats().errors).toBe(3);
      expect(await exists(s.filePath(key(6)))).toBe(false);
      expect(await tempFiles(dir)).toEqual([]);
    } finally {
      await c.workers?.close();
      c.workers = good;
    }
    // Working workers again: the block was never lost.
    expect(sameBytes((await s.getMany([key(5)]))[0], value)).toBe(true);
  });

  it('hashes inline for good after workers fail again and again (they cannot run here)', async () => {
    const s = await store();
    const c = checksummer(s);
    await c.workers?.close();
    const broken = new ChecksumPool(2, CRASHING);
    c.workers = broken;
    const value = block(8, 200_000);
    for (let i = 0; i < GIVE_UP_AFTER; i++) {
      expect(await s.putMany([{ key: key(i), value }])).toBe(0);
    }
    expect(s.stats().errors).toBe(GIVE_UP_AFTER);
    expect(c.inlineAfterFailures).toBe(true);
    expect(c.workers).toBeUndefined();
    expect(broken.size).toBe(0);
    // The tier still works, inline, and its files are the same as ever.
    expect(await s.putMany([{ key: key(0), value }])).toBe(1);
    expect(sameBytes((await s.getMany([key(0)]))[0], value)).toBe(true);
    const inline = await store({ checksumThreads: 0 });
    expect(sameBytes((await inline.getMany([key(0)]))[0], value)).toBe(true);
  });

  it('keeps its workers when failures are not in a row', async () => {
    const s = await store();
    const c = checksummer(s);
    const good = c.workers;
    const value = block(9, 200_000);
    for (let i = 0; i < 2 * GIVE_UP_AFTER; i++) {
      // One failure (a crashing pool), then a success with the real one, again and again.
      const broken = new ChecksumPool(1, CRASHING);
      c.workers = broken;
      expect(await s.putMany([{ key: key(`b${i}`), value }])).toBe(0);
      await broken.close();
      c.workers = good;
      expect(await s.putMany([{ key: key(`g${i}`), value }])).toBe(1);
    }
    expect(c.inlineAfterFailures).toBe(false);
    expect(c.workers).toBe(good);
  });

  it('close() ends the workers; later calls fail with CLOSED, calls in flight settle', async () => {
    const s = await store();
    const values = [0, 1, 2, 3].map((i) => block(i, 400_000));
    await s.putMany(values.map((value, i) => ({ key: key(i), value })));
    const pool = checksummer(s).workers;
    expect(pool?.size).toBeGreaterThan(0);
    const inFlight = s.getMany([0, 1, 2, 3].map(key));
    await s.close();
    expect(pool?.size).toBe(0);
    expect(checksummer(s).workers).toBeUndefined();
    // Each block is either its own bytes or a miss; never other bytes, never a hang.
    const got = await inFlight;
    got.forEach((v, i) => {
      if (v !== undefined) expect(sameBytes(v, values[i])).toBe(true);
    });
    await expect(s.getMany([key(0)])).rejects.toMatchObject({ code: 'CLOSED' });
    await expect(s.putMany([{ key: key(9), value: values[0]! }])).rejects.toMatchObject({
      code: 'CLOSED',
    });
    await s.close(); // idempotent
    // The files stay for the next open.
    const again = await store();
    expect(sameBytes((await again.getMany([key(2)]))[0], values[2])).toBe(true);
  });

  it("validates checksumThreads and sizes 'auto' from the machine", async () => {
    await expect(store({ checksumThreads: -1 })).rejects.toMatchObject({
      code: 'INVALID_OPTIONS',
    });
    await expect(store({ checksumMinBytes: 0 })).rejects.toMatchObject({
      code: 'INVALID_OPTIONS',
    });
    const auto = await store({ checksumThreads: 'auto' });
    expect(auto.checksumThreads).toBe(autoChecksumThreads());
    const dflt = await DiskStore.open({ namespace: NS, dir, maxBytes: 1 << 20 });
    open.push(dflt);
    expect(dflt.checksumThreads).toBe(autoChecksumThreads());
  });
});
