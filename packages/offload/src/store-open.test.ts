import { mkdtemp, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { DiskStore } from './disk-store.js';
import { OffloadError } from './errors.js';
import { checkRedisUrl, RedisStore } from './redis-store.js';
import { NS } from './testing/fixtures.js';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kvasir-open-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function openError(path: string): Promise<OffloadError> {
  const error = await DiskStore.open({ namespace: NS, dir: path, maxBytes: 1 << 20 }).then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(OffloadError.isInstance(error)).toBe(true);
  return error as OffloadError;
}

describe('opening a store that cannot work', () => {
  it('DiskStore.open settles with UNAVAILABLE where mkdir answers ENOENT under a parent that exists (/proc)', async () => {
    // Node's recursive mkdir retries this pair of calls for ever; the open must settle.
    const error = await openError('/proc/kvasir-offload-test/cache');
    expect(error.code).toBe('UNAVAILABLE');
    expect(error.message).toContain('/proc/kvasir-offload-test/cache');
    expect(error.message).toMatch(/cannot be created there \(ENOENT\)/);
  });

  it('DiskStore.open names a regular file in the path (ENOTDIR), at any depth', async () => {
    const file = join(dir, 'a-file');
    await writeFile(file, 'x');
    for (const path of [file, join(file, 'below'), join(file, 'below', 'deeper')]) {
      const error = await openError(path);
      expect(error.code).toBe('UNAVAILABLE');
      expect(error.message).toMatch(/is a file, not a directory \(ENOTDIR\)/);
    }
  });

  it('DiskStore.open creates missing levels and reopens an existing directory', async () => {
    const nested = join(dir, 'x', 'y', 'z');
    const first = await DiskStore.open({ namespace: NS, dir: nested, maxBytes: 1 << 20 });
    await first.close();
    expect((await stat(join(nested, NS))).isDirectory()).toBe(true);
    const again = await DiskStore.open({ namespace: NS, dir: nested, maxBytes: 1 << 20 });
    await again.close();
  });

  it('RedisStore refuses a URL that is not redis:// or rediss:// before connecting', () => {
    for (const url of ['http://foo', 'foo:6379', '127.0.0.1', 'redis://']) {
      const error = (() => {
        try {
          new RedisStore({ namespace: NS, url });
          return undefined;
        } catch (e) {
          return e;
        }
      })();
      expect(OffloadError.isInstance(error), url).toBe(true);
      expect((error as OffloadError).code).toBe('INVALID_OPTIONS');
    }
    expect(() => checkRedisUrl('redis://127.0.0.1:6379')).not.toThrow();
    expect(() => checkRedisUrl('rediss://:secret@cache.example:6380/2')).not.toThrow();
  });
});
