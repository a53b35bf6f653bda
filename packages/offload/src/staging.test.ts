import { mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { DiskStore } from './disk-store.js';
import { OffloadError } from './errors.js';
import { isStagingBuffer, stagingBuffers } from './staging.js';
import { block, key, NS, sameBytes } from './testing/fixtures.js';
import { xxh64 } from './xxh64.js';

describe('stagingBuffers', () => {
  it('hashes staging buffers in place to the digests of the same bytes anywhere else', () => {
    // Every path of XXH64: no stripe, tails of 1-31 bytes, one stripe, several 1 MiB chunks.
    const lengths = [0, 1, 31, 32, 33, 100, 4096, 65_539, (1 << 20) + 13, 2 << 20];
    const staged = stagingBuffers(lengths.length, 2 << 20);
    lengths.forEach((n, i) => {
      const plain = block(n + 1, n);
      const view = (staged[i] as Uint8Array).subarray(0, n);
      view.set(plain);
      expect(isStagingBuffer(view)).toBe(true);
      expect(xxh64(view, 42n)).toBe(xxh64(plain, 42n));
      expect(xxh64(view)).toBe(xxh64(plain));
    });
  });

  it('gives the same digest as a plain copy at any offset and length (property)', () => {
    const [area] = stagingBuffers(1, 8192);
    fc.assert(
      fc.property(
        fc.uint8Array({ minLength: 0, maxLength: 4000 }),
        fc.integer({ min: 0, max: 4000 }),
        (bytes, at) => {
          const view = (area as Uint8Array).subarray(at, at + bytes.length);
          view.set(bytes);
          return isStagingBuffer(view) && xxh64(view) === xxh64(bytes.slice());
        },
      ),
      { numRuns: 200 },
    );
  });

  it('lays the buffers out page-aligned and apart, and recognises only them', () => {
    const bufs = stagingBuffers(3, 5000);
    expect(bufs.map((b) => b.byteLength)).toEqual([5000, 5000, 5000]);
    for (const b of bufs) expect(b.byteOffset % 4096).toBe(0);
    bufs.forEach((b, i) => {
      b.fill(i + 1);
    });
    bufs.forEach((b, i) => {
      expect(b.every((x) => x === i + 1)).toBe(true);
    });
    const first = bufs[0] as Uint8Array;
    expect(isStagingBuffer(first.subarray(10, 20))).toBe(true);
    // The start of the memory holds the hash's own state: not a staging buffer.
    expect(isStagingBuffer(new Uint8Array(first.buffer, 0, 64))).toBe(false);
    expect(isStagingBuffer(new Uint8Array(5000))).toBe(false);
    expect(isStagingBuffer(Buffer.from(first))).toBe(false);
    // Digests of a staging buffer and of a plain one never mix state.
    const plain = block(3, 5000);
    first.set(block(4, 5000));
    const a = xxh64(first);
    const b = xxh64(plain);
    expect([xxh64(first), xxh64(plain)]).toEqual([a, b]);
    expect(a).toBe(xxh64(block(4, 5000)));
  });

  it('refuses sizes that are not positive integers, or too large, with INVALID_OPTIONS', () => {
    const bad: [number, number][] = [
      [0, 1],
      [1, 0],
      [-1, 16],
      [1.5, 16],
      [Number.NaN, 16],
      [1, Number.POSITIVE_INFINITY],
      [2, 2 ** 31], // 4 GiB in all: more than one WebAssembly memory holds
      ['3' as unknown as number, 16],
    ];
    for (const [count, bytes] of bad) {
      const call = () => stagingBuffers(count, bytes);
      expect(call).toThrow(OffloadError);
      try {
        call();
      } catch (e) {
        expect((e as OffloadError).code).toBe('INVALID_OPTIONS');
        expect((e as OffloadError).message).toMatch(/stagingBuffers/);
      }
    }
  });
});

describe('DiskStore with staging buffers', () => {
  let dir: string;
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'kvasir-staging-'));
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('puts from and reads into staging buffers, which are free to reuse after putMany', async () => {
    const s = await DiskStore.open({ namespace: NS, dir, maxBytes: 1 << 22 });
    const n = 4;
    const size = 100_003;
    const out = stagingBuffers(n, size);
    const into = stagingBuffers(n, size);
    const want = Array.from({ length: n }, (_, i) => block(i + 10, size));
    out.forEach((b, i) => {
      b.set(want[i] as Uint8Array);
    });
    expect(await s.putMany(out.map((value, i) => ({ key: key(i), value })))).toBe(n);
    for (const b of out) b.fill(0); // the next step's staging: the store kept its own bytes
    expect(await s.getManyInto([0, 1, 2, 3].map(key), into)).toEqual([true, true, true, true]);
    into.forEach((b, i) => {
      expect(sameBytes(b, want[i])).toBe(true);
    });
    const got = await s.getMany([key(2)]);
    expect(sameBytes(got[0], want[2])).toBe(true);
    expect(s.stats()).toMatchObject({ corrupt: 0, errors: 0, hits: n + 1 });
  });

  it('still detects a flipped payload byte read into a staging buffer, and deletes the file', async () => {
    const s = await DiskStore.open({ namespace: NS, dir, maxBytes: 1 << 22 });
    const [staged] = stagingBuffers(1, 3000);
    (staged as Uint8Array).set(block(5, 3000));
    await s.putMany([{ key: key(5), value: staged as Uint8Array }]);
    const path = s.filePath(key(5));
    const bytes = await readFile(path);
    bytes[bytes.length - 100] = (bytes[bytes.length - 100] ?? 0) ^ 0x10;
    await writeFile(path, bytes);
    expect(await s.getManyInto([key(5)], [staged as Uint8Array])).toEqual([false]);
    await expect(stat(path)).rejects.toThrow();
    expect(s.stats()).toMatchObject({ corrupt: 1, misses: 1, entries: 0 });
  });
});
