import { spawn } from 'node:child_process';
import { type FileHandle, mkdtemp, open, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import fc from 'fast-check';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  autoChecksumThreads,
  CHECKSUM_WORKER_SOURCE,
  Checksummer,
  ChecksumPool,
  GIVE_UP_AFTER,
  resolveChecksumThreads,
} from './checksum-pool.js';
import { OffloadError } from './errors.js';
import { block, sameBytes } from './testing/fixtures.js';
import { xxh64 } from './xxh64.js';

// A worker that dies on its first job, and one that answers with an error.
const CRASHING = CHECKSUM_WORKER_SOURCE.replace(
  "parentPort.on('message', (m) => {",
  "parentPort.on('message', (m) => { process.exit(3);",
);
const THROWING = CHECKSUM_WORKER_SOURCE.replace(
  'for (let i = 0; i < 4; i++) state[i] = m.init[i];',
  "throw new Error('boom');",
);

const pools: ChecksumPool[] = [];
function pool(threads: number, source?: string): ChecksumPool {
  const p = new ChecksumPool(threads, source);
  pools.push(p);
  return p;
}
let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kvasir-pool-'));
});
afterEach(async () => {
  await Promise.all(pools.splice(0).map((p) => p.close()));
  await Promise.all(handles.splice(0).map((h) => h.close()));
  await rm(dir, { recursive: true, force: true });
});

let files = 0;
const handles: FileHandle[] = [];
/**
 * Writes `bytes` to a new file behind `offset` bytes of something else; returns a descriptor
 * open for reading (closed after the test).
 */
async function written(bytes: Uint8Array, offset: number): Promise<number> {
  const path = join(dir, `f${files++}`);
  const out = new Uint8Array(offset + bytes.byteLength);
  out.fill(0xa5, 0, offset);
  out.set(bytes, offset);
  await writeFile(path, out);
  const h = await open(path, 'r');
  handles.push(h);
  return h.fd;
}

/** `bytes` as a view at `offset` into an ArrayBuffer of its own (as a store's read buffer). */
function owned(bytes: Uint8Array, offset: number): Uint8Array {
  const ab = new ArrayBuffer(offset + bytes.byteLength + 7);
  const v = new Uint8Array(ab, offset, bytes.byteLength);
  v.set(bytes);
  return v;
}

describe('ChecksumPool', () => {
  it('derives the same digest as xxh64 on this thread, from a file or moved (property)', async () => {
    const p = pool(2);
    await fc.assert(
      fc.asyncProperty(
        fc.uint8Array({ minLength: 0, maxLength: 3000 }),
        fc.nat({ max: 70 }),
        async (bytes, offset) => {
          const want = xxh64(bytes);
          expect(await p.hashFile(await written(bytes, offset), offset, bytes)).toBe(want);
          const moved = await p.hashTransfer(owned(bytes, offset));
          expect(moved.sum).toBe(want);
          expect(sameBytes(moved.data, bytes)).toBe(true);
        },
      ),
      { numRuns: 60 },
    );
    expect(p.size).toBeGreaterThanOrEqual(1);
    expect(p.size).toBeLessThanOrEqual(2);
  });

  it('hashes multi-chunk blocks concurrently, each to its own digest', async () => {
    const p = pool(2);
    // Sizes around and beyond the module's 1 MiB chunk, with 0..31-byte tails.
    const blocks = [0, 1, 2, 3, 4, 5].map((i) => block(i, (1 << 20) + 977 * i));
    const want = blocks.map((b) => xxh64(b));
    const fds = await Promise.all(blocks.map((b) => written(b, 64)));
    const fromFiles = await Promise.all(blocks.map((b, i) => p.hashFile(fds[i]!, 64, b)));
    const moved = await Promise.all(blocks.map((b, i) => p.hashTransfer(owned(b, i))));
    expect(fromFiles).toEqual(want);
    expect(moved.map((m) => m.sum)).toEqual(want);
    moved.forEach((m, i) => {
      expect(sameBytes(m.data, blocks[i])).toBe(true);
    });
    expect(p.size).toBe(2);
  });

  it('hashes the file, not the bytes it is handed (which only supply the tail)', async () => {
    const p = pool(1);
    const onDisk = block(1, 5000);
    const other = block(2, 5000);
    other.set(onDisk.subarray(4992), 4992); // same last 8 bytes (the tail), other stripes
    expect(await p.hashFile(await written(onDisk, 0), 0, other)).toBe(xxh64(onDisk));
  });

  it('moves the buffer without a copy: the original is detached meanwhile', async () => {
    const p = pool(1);
    const v = owned(block(1, 4096), 16);
    const ab = v.buffer;
    const pending = p.hashTransfer(v);
    expect(ab.byteLength).toBe(0); // detached: the worker holds it
    const { data } = await pending;
    expect(data.byteOffset).toBe(16);
    expect(data.buffer.byteLength).toBe(16 + 4096 + 7);
  });

  it('answers undefined for a file shorter than the range, rejects an unreadable one, and keeps working', async () => {
    const p = pool(1);
    const bytes = block(1, 4096);
    // A file that ends inside the range (it changed): no digest, and not a worker failure.
    expect(await p.hashFile(await written(bytes.subarray(0, 2000), 0), 0, bytes)).toBeUndefined();
    expect(await p.hashFile(await written(bytes, 0), 64, bytes)).toBeUndefined();
    // A descriptor that cannot be read (a directory): the worker reports an error.
    const d = await open(dir, 'r');
    handles.push(d);
    await expect(p.hashFile(d.fd, 0, bytes)).rejects.toMatchObject({ code: 'CHECKSUM_WORKER' });
    expect(await p.hashFile(await written(bytes, 0), 0, bytes)).toBe(xxh64(bytes));
    expect(p.size).toBe(1);
  });

  it('rejects with CHECKSUM_WORKER when a worker dies, and starts a new one for later jobs', async () => {
    const p = pool(1, CRASHING);
    await expect(p.hashTransfer(owned(block(1, 4096), 0))).rejects.toMatchObject({
      code: 'CHECKSUM_WORKER',
    });
    const bytes = block(2, 4096);
    await expect(p.hashFile(await written(bytes, 0), 0, bytes)).rejects.toBeInstanceOf(
      OffloadError,
    );
    expect(p.size).toBe(0);
    const q = pool(1, THROWING);
    await expect(q.hashTransfer(owned(block(1, 4096), 0))).rejects.toMatchObject({
      code: 'CHECKSUM_WORKER',
    });
    // The worker survives an error it reported; the next job is answered too (not a hang).
    await expect(q.hashTransfer(owned(block(2, 64), 0))).rejects.toMatchObject({
      code: 'CHECKSUM_WORKER',
    });
    expect(q.size).toBe(1);
  });

  it('close() ends every worker and refuses pending and later jobs with CLOSED', async () => {
    const p = pool(2);
    await Promise.all([
      p.hashTransfer(owned(block(1, 1 << 20), 0)),
      p.hashTransfer(owned(block(2, 1 << 20), 0)),
    ]);
    expect(p.size).toBe(2);
    const pending = expect(p.hashTransfer(owned(block(3, 4 << 20), 0))).rejects.toMatchObject({
      code: 'CLOSED',
    });
    await p.close();
    expect(p.size).toBe(0);
    await pending;
    await expect(p.hashTransfer(owned(block(4, 64), 0))).rejects.toMatchObject({
      code: 'CLOSED',
    });
    await p.close(); // idempotent
  });

  it('never keeps the process alive, but waits for a pending result', async () => {
    const script = fileURLToPath(new URL('./testing/checksum-pool.fixture.ts', import.meta.url));
    const out = await new Promise<{ code: number | null; stdout: string }>((resolve, reject) => {
      const child = spawn(process.execPath, ['--import', 'tsx', script], {
        stdio: ['ignore', 'pipe', 'inherit'],
      });
      let stdout = '';
      child.stdout.on('data', (d: Buffer) => {
        stdout += d.toString();
      });
      // A child held alive by an idle worker would never exit: end it well before the test's
      // own timeout so the failure is this assertion's, not a stray process.
      const guard = setTimeout(() => child.kill(), 45_000);
      child.on('error', reject);
      child.on('exit', (code) => {
        clearTimeout(guard);
        resolve({ code, stdout });
      });
    });
    expect(out).toEqual({ code: 0, stdout: 'same digest\n' });
  });
});

describe('Checksummer', () => {
  it('hashes inline below minBytes or without threads, on the pool above', async () => {
    const inline = new Checksummer(0, 1);
    expect(inline.workers).toBeUndefined();
    expect(inline.offloads(1 << 30)).toBe(false);
    const c = new Checksummer(2, 1000);
    try {
      expect(c.offloads(999)).toBe(false);
      expect(c.offloads(1000)).toBe(true);
      const small = block(1, 999);
      const large = block(2, 5000);
      // Below minBytes the file is not read at all (the descriptor is not even valid).
      expect(await c.ofFile(-1, 0, small)).toBe(xxh64(small));
      const r0 = await c.ofOwned(small);
      expect(r0).toEqual({ sum: xxh64(small), data: small });
      expect(c.workers?.size).toBe(0); // nothing was sent to a worker yet
      expect(await c.ofFile(await written(large, 64), 64, large)).toBe(xxh64(large));
      const r = await c.ofOwned(owned(large, 3));
      expect(r.sum).toBe(xxh64(large));
      expect(sameBytes(r.data, large)).toBe(true);
      expect(c.workers?.size).toBe(1);
    } finally {
      await c.close();
    }
    expect(c.workers).toBeUndefined();
  });

  it('a file that changed is not a worker failure: it never turns the threads off', async () => {
    const c = new Checksummer(1, 1);
    try {
      const bytes = block(3, 4096);
      for (let i = 0; i <= GIVE_UP_AFTER; i++) {
        expect(await c.ofFile(await written(bytes.subarray(0, 100), 0), 0, bytes)).toBeUndefined();
      }
      expect(c.inlineAfterFailures).toBe(false);
      expect(c.workers).toBeDefined();
      expect(await c.ofFile(await written(bytes, 0), 0, bytes)).toBe(xxh64(bytes));
    } finally {
      await c.close();
    }
  });

  it("sizes 'auto' from the cores: none on two or fewer, then one per spare core up to 8", () => {
    expect([1, 2, 3, 4, 9, 16, 64].map((n) => autoChecksumThreads(n))).toEqual([
      0, 0, 2, 3, 8, 8, 8,
    ]);
    expect(resolveChecksumThreads('auto')).toBe(autoChecksumThreads());
    expect(resolveChecksumThreads(undefined)).toBe(autoChecksumThreads());
    expect(resolveChecksumThreads(3)).toBe(3);
    for (const bad of [-1, 1.5, 65, Number.NaN, '2' as unknown as number]) {
      expect(() => resolveChecksumThreads(bad)).toThrow(OffloadError);
    }
  });
});
