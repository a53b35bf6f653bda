import { createHash } from 'node:crypto';
import type { BlockHash } from '@kvasir/kv-allocator';
import { Cluster, Redis, type RedisOptions } from 'ioredis';
import { OffloadError } from './errors.js';
import { decodeFrame, encodeFrame } from './frame.js';
import { checkNamespace } from './keys.js';
import { Counters } from './stats.js';
import type { KvBlockEntry, KvBlockStore, OffloadStats } from './types.js';
import { checkBudget, checkEntries, checkKeys, checkOpen } from './validate.js';

// Counts the leading keys that exist, server-side, in one command (plain Redis only: on a
// cluster the keys of a prefix live in different slots).
const PREFIX_SCRIPT = `local n = 0
for i = 1, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 0 then return n end
  n = n + 1
end
return n`;
const PREFIX_SCRIPT_SHA = createHash('sha1').update(PREFIX_SCRIPT).digest('hex');

/** Redis refuses strings over 512 MB (`proto-max-bulk-len`); leave room for the header. */
const REDIS_MAX_VALUE = 512 * 1024 * 1024 - 4096;

/**
 * Checks that `url` is one a {@link RedisStore} can connect to: `redis://` or `rediss://` with
 * a host (ioredis would read `http://foo` as `foo:6379` and retry it for ever).
 * @throws {OffloadError} INVALID_OPTIONS naming what is wrong.
 */
export function checkRedisUrl(url: string): void {
  if (CLUSTER_SCHEME.test(url)) {
    parseRedisClusterUrl(url);
    return;
  }
  let parsed: URL | undefined;
  try {
    parsed = new URL(url);
  } catch {
    parsed = undefined;
  }
  if (parsed === undefined || (parsed.protocol !== 'redis:' && parsed.protocol !== 'rediss:')) {
    throw new OffloadError(
      'INVALID_OPTIONS',
      `Redis URL ${JSON.stringify(url)} is not a redis:// or rediss:// URL (e.g. redis://127.0.0.1:6379)`,
      { details: { url } },
    );
  }
  if (parsed.hostname === '') {
    throw new OffloadError('INVALID_OPTIONS', `Redis URL ${JSON.stringify(url)} has no host`, {
      details: { url },
    });
  }
}

const CLUSTER_SCHEME = /^rediss?\+cluster:\/\//i;

/** A Redis Cluster to connect to, parsed from a `redis+cluster://` URL. */
export interface RedisClusterUrl {
  /** Seed nodes: the client learns the others (and the slot map) from any one of them. */
  readonly nodes: readonly { readonly host: string; readonly port: number }[];
  readonly username?: string;
  readonly password?: string;
  /** `rediss+cluster://`: TLS to every node. */
  readonly tls: boolean;
}

/**
 * Parses `redis+cluster://[user:password@]host:port[,host:port...]` (or `rediss+cluster://` for
 * TLS): a Redis Cluster given by one or more seed nodes. A port defaults to 6379.
 * @throws {OffloadError} INVALID_OPTIONS naming what is wrong.
 */
export function parseRedisClusterUrl(url: string): RedisClusterUrl {
  const bad = (why: string): OffloadError =>
    new OffloadError('INVALID_OPTIONS', `Redis Cluster URL ${JSON.stringify(url)} ${why}`, {
      details: { url },
    });
  const m = /^(rediss?)\+cluster:\/\/(?:([^@/]*)@)?([^/?#]*)\/?$/i.exec(url);
  if (m === null) throw bad('is not redis+cluster://host:port[,host:port...]');
  const [, scheme, auth, hosts] = m as unknown as [string, string, string | undefined, string];
  const nodes = hosts.split(',').map((h) => {
    const hp = /^(\[[0-9a-fA-F:.]+\]|[^:[\]]+)(?::(\d+))?$/.exec(h.trim());
    if (hp === null) throw bad(`has a malformed node ${JSON.stringify(h)} (want host:port)`);
    const port = hp[2] === undefined ? 6379 : Number(hp[2]);
    if (!Number.isInteger(port) || port < 1 || port > 65535) {
      throw bad(`has a port out of range in ${JSON.stringify(h)}`);
    }
    return { host: (hp[1] as string).replace(/^\[|\]$/g, ''), port };
  });
  let username: string | undefined;
  let password: string | undefined;
  if (auth !== undefined && auth !== '') {
    const cut = auth.indexOf(':');
    username = decodeURIComponent(cut < 0 ? auth : auth.slice(0, cut)) || undefined;
    password = cut < 0 ? undefined : decodeURIComponent(auth.slice(cut + 1));
    if (cut < 0) {
      password = username;
      username = undefined;
    }
  }
  return {
    nodes,
    ...(username !== undefined ? { username } : {}),
    ...(password !== undefined ? { password } : {}),
    tls: scheme.toLowerCase() === 'rediss',
  };
}

/** Options of {@link RedisStore}. */
export interface RedisStoreOptions {
  /** Namespace fingerprint from `kvNamespace()`. */
  readonly namespace: string;
  /**
   * `redis://[:password@]host:port[/db]`, or `redis+cluster://host:port[,host:port...]` for a
   * Redis Cluster (ioredis' `Cluster` client over those seed nodes); ignored when `client` is
   * given. Default `redis://127.0.0.1:6379`.
   */
  readonly url?: string;
  /** Extra ioredis options for the connection this store opens (its timeouts win over the defaults below). */
  readonly redisOptions?: RedisOptions;
  /**
   * An existing ioredis `Redis` or `Cluster` client. The store does not close it. Give it
   * `enableOfflineQueue: false` and bounded timeouts so an outage turns into quick misses.
   */
  readonly client?: Redis | Cluster;
  /** Prepended to every key (default `kvasir:kv:`). Keys are `<prefix><namespace>:<hash>`. */
  readonly keyPrefix?: string;
  /** Expire blocks this many seconds after they are written (default: never; rely on Redis `maxmemory-policy`). */
  readonly ttlSeconds?: number;
  /** Largest accepted value (default and maximum: 512 MiB less 4 KiB). */
  readonly maxValueBytes?: number;
  /** A pipeline is cut after this many value bytes (default 64 MiB), bounding each round trip. */
  readonly maxBatchBytes?: number;
  /** Connect timeout (default 1,000 ms). */
  readonly connectTimeoutMs?: number;
  /** Per-command timeout (default 5,000 ms): a stalled Redis costs at most this per call. */
  readonly commandTimeoutMs?: number;
  /** Longest wait between reconnection attempts (default 500 ms). */
  readonly maxReconnectDelayMs?: number;
}

/** `stats()` of a {@link RedisStore}: the common counters plus connection state. */
export interface RedisStoreStats extends OffloadStats {
  /** ioredis connection status: `ready` when usable. */
  readonly status: string;
  /** Calls answered with misses (or skipped writes) because Redis was not connected. */
  readonly unavailable: number;
}

type Reply = [Error | null, unknown];

/**
 * KV blocks in Redis, shared by every engine replica that uses the same namespace: one string
 * per block holding header and payload together (so no half can be orphaned), written with
 * one `SET`, read with one `GET`, batched in pipelines of single-key commands. Single-key
 * commands only, so it works on Redis Cluster too (a `Cluster` client sends them per node).
 *
 * Failure behaviour: the connection has bounded connect and command timeouts and no offline
 * queue, so when Redis is down every call returns misses (or stores nothing) at once and
 * counts `errors`/`unavailable`; ioredis keeps reconnecting in the background and the store
 * works again as soon as Redis is back. Nothing is thrown into the engine but misuse.
 */
export class RedisStore implements KvBlockStore {
  readonly tier = 'redis';
  readonly namespace: string;
  readonly keyPrefix: string;
  private readonly client: Redis | Cluster;
  private readonly ownsClient: boolean;
  private readonly ttlSeconds: number | undefined;
  readonly maxValueBytes: number;
  private readonly maxBatchBytes: number;
  private readonly counters = new Counters();
  private unavailable = 0;
  private closed = false;

  /**
   * @throws {OffloadError} INVALID_KEY for a malformed namespace, INVALID_OPTIONS for bad options
   *   (a `url` that is not `redis://` or `rediss://` among them).
   */
  constructor(options: RedisStoreOptions) {
    checkNamespace(options.namespace);
    this.namespace = options.namespace;
    this.keyPrefix = options.keyPrefix ?? 'kvasir:kv:';
    if (options.ttlSeconds !== undefined) {
      if (!Number.isInteger(options.ttlSeconds) || options.ttlSeconds < 1) {
        throw new OffloadError('INVALID_OPTIONS', 'ttlSeconds must be a positive integer', {
          details: { ttlSeconds: options.ttlSeconds },
        });
      }
    }
    this.ttlSeconds = options.ttlSeconds;
    this.maxValueBytes = Math.min(
      checkBudget('maxValueBytes', options.maxValueBytes ?? REDIS_MAX_VALUE),
      REDIS_MAX_VALUE,
    );
    this.maxBatchBytes = checkBudget('maxBatchBytes', options.maxBatchBytes ?? 64 * 1024 * 1024);
    if (options.url !== undefined && options.client === undefined) checkRedisUrl(options.url);
    if (options.client !== undefined) {
      this.client = options.client;
      this.ownsClient = false;
    } else {
      const maxDelay = options.maxReconnectDelayMs ?? 500;
      const base: RedisOptions = {
        connectTimeout: options.connectTimeoutMs ?? 1000,
        commandTimeout: options.commandTimeoutMs ?? 5000,
        maxRetriesPerRequest: 1,
        enableOfflineQueue: false,
        retryStrategy: (times: number) => Math.min(50 * times, maxDelay),
        ...options.redisOptions,
      };
      const url = options.url ?? 'redis://127.0.0.1:6379';
      if (CLUSTER_SCHEME.test(url)) {
        const c = parseRedisClusterUrl(url);
        const { maxRetriesPerRequest: _, enableOfflineQueue: __, ...nodeOptions } = base;
        // Bounded like a single node: no offline queue, one redirection retry, a quick slot
        // refresh. While a master fails over its slots' commands fail at once (misses, skipped
        // writes); the client re-reads the slot map and finds the promoted replica.
        this.client = new Cluster([...c.nodes], {
          enableOfflineQueue: false,
          enableReadyCheck: true,
          maxRedirections: 4,
          retryDelayOnFailover: 50,
          retryDelayOnClusterDown: 50,
          retryDelayOnTryAgain: 50,
          slotsRefreshTimeout: base.connectTimeout ?? 1000,
          clusterRetryStrategy: (times: number) => Math.min(50 * times, maxDelay),
          redisOptions: {
            ...nodeOptions,
            maxRetriesPerRequest: 1,
            ...(c.username !== undefined ? { username: c.username } : {}),
            ...(c.password !== undefined ? { password: c.password } : {}),
            ...(c.tls ? { tls: {} } : {}),
          },
        });
      } else {
        this.client = new Redis(url, base);
      }
      this.ownsClient = true;
    }
    // Without a listener ioredis prints every connection error; the count is what we want.
    this.client.on('error', () => {
      this.counters.errors++;
    });
  }

  /** The Redis key of a block. */
  redisKey(key: BlockHash): string {
    return `${this.keyPrefix}${this.namespace}:${key}`;
  }

  /**
   * Resolves true once connected, false if not connected within `timeoutMs` (default 2,000).
   * Calls made before then are misses.
   */
  async ready(timeoutMs = 2000): Promise<boolean> {
    if (this.client.status === 'ready') return true;
    return new Promise<boolean>((resolve) => {
      const onReady = (): void => {
        clearTimeout(timer);
        resolve(true);
      };
      const timer = setTimeout(() => {
        this.client.off('ready', onReady);
        resolve(this.client.status === 'ready');
      }, timeoutMs);
      timer.unref?.();
      this.client.once('ready', onReady);
    });
  }

  private get isReady(): boolean {
    return this.client.status === 'ready';
  }

  private get isCluster(): boolean {
    return (this.client as Cluster).isCluster === true;
  }

  /**
   * Sends one single-key command per item and returns the replies in order. A plain client
   * gets one pipeline per batch; a Cluster client gets the commands concurrently so ioredis
   * routes each to its slot's node (no cross-slot pipeline).
   */
  private async run(
    count: number,
    add: (p: Pick<Redis, 'set' | 'getBuffer' | 'exists' | 'del'>, i: number) => unknown,
  ): Promise<Reply[]> {
    if (count === 0) return [];
    if (!this.isReady) {
      this.unavailable++;
      return new Array<Reply>(count).fill([new Error('redis not connected'), null]);
    }
    try {
      if (this.isCluster) {
        const cluster = this.client as unknown as Redis;
        const settled = await Promise.allSettled(
          Array.from({ length: count }, (_, i) => add(cluster, i) as Promise<unknown>),
        );
        return settled.map((s) =>
          s.status === 'fulfilled' ? [null, s.value] : [s.reason as Error, null],
        );
      }
      const pipeline = (this.client as Redis).pipeline();
      for (let i = 0; i < count; i++) add(pipeline as unknown as Redis, i);
      const replies = await pipeline.exec();
      if (replies === null)
        return new Array<Reply>(count).fill([new Error('pipeline aborted'), null]);
      return replies as Reply[];
    } catch (e) {
      return new Array<Reply>(count).fill([e as Error, null]);
    }
  }

  /**
   * Stores each block as one Redis string (header and payload), pipelined in batches of at most
   * `maxBatchBytes`. Entries that fail (Redis down, timeout) are not stored and counted in `errors`.
   * @throws {OffloadError} INVALID_KEY, INVALID_VALUE, VALUE_TOO_LARGE, CLOSED.
   */
  async putMany(entries: readonly KvBlockEntry[]): Promise<number> {
    checkOpen(this.closed, this.tier);
    checkEntries(entries, this.maxValueBytes);
    let stored = 0;
    let start = 0;
    while (start < entries.length) {
      let end = start;
      let bytes = 0;
      while (
        end < entries.length &&
        (end === start || bytes + (entries[end]?.value.byteLength ?? 0) <= this.maxBatchBytes)
      ) {
        bytes += entries[end]?.value.byteLength ?? 0;
        end++;
      }
      const batch = entries.slice(start, end);
      const frames = batch.map((e) => encodeFrame(this.namespace, e.key, e.value));
      const replies = await this.run(batch.length, (p, i) => {
        const k = this.redisKey((batch[i] as KvBlockEntry).key);
        const f = frames[i] as Uint8Array;
        const v = Buffer.from(f.buffer, f.byteOffset, f.byteLength);
        return this.ttlSeconds === undefined ? p.set(k, v) : p.set(k, v, 'EX', this.ttlSeconds);
      });
      for (let i = 0; i < replies.length; i++) {
        const [err] = replies[i] as Reply;
        if (err === null) {
          stored++;
          this.counters.puts++;
          this.counters.bytesWritten += (frames[i] as Buffer).byteLength;
        } else {
          this.counters.errors++;
        }
      }
      start = end;
    }
    return stored;
  }

  /**
   * Reads and verifies blocks; a corrupt or foreign value is deleted and counted, and every
   * failure is a miss. Returned arrays are views of fresh buffers the caller owns.
   * @throws {OffloadError} INVALID_KEY, CLOSED.
   */
  async getMany(keys: readonly BlockHash[]): Promise<(Uint8Array | undefined)[]> {
    checkOpen(this.closed, this.tier);
    checkKeys(keys);
    const out: (Uint8Array | undefined)[] = new Array(keys.length).fill(undefined);
    const bad: BlockHash[] = [];
    // Values are unknown in size before they arrive; a fixed batch keeps each reply bounded.
    const batch = Math.max(1, Math.floor(this.maxBatchBytes / (2 * 1024 * 1024)));
    for (let start = 0; start < keys.length; start += batch) {
      const part = keys.slice(start, start + batch);
      const replies = await this.run(part.length, (p, i) =>
        p.getBuffer(this.redisKey(part[i] as BlockHash)),
      );
      for (let i = 0; i < part.length; i++) {
        const [err, value] = replies[i] as Reply;
        const key = part[i] as BlockHash;
        if (err !== null) {
          this.counters.errors++;
          this.counters.misses++;
          continue;
        }
        if (!(value instanceof Uint8Array)) {
          this.counters.misses++;
          continue;
        }
        const decoded = decodeFrame(value, this.namespace, key);
        if (!decoded.ok) {
          if (decoded.fault === 'foreign') this.counters.foreign++;
          else this.counters.corrupt++;
          this.counters.misses++;
          bad.push(key);
          continue;
        }
        this.counters.hits++;
        this.counters.bytesRead += value.byteLength;
        out[start + i] = decoded.payload;
      }
    }
    if (bad.length > 0)
      await this.run(bad.length, (p, i) => p.del(this.redisKey(bad[i] as BlockHash)));
    return out;
  }

  private async presence(keys: readonly BlockHash[]): Promise<boolean[]> {
    const replies = await this.run(keys.length, (p, i) =>
      p.exists(this.redisKey(keys[i] as BlockHash)),
    );
    return replies.map(([err, n]) => {
      if (err !== null) this.counters.errors++;
      return err === null && n === 1;
    });
  }

  /** @throws {OffloadError} INVALID_KEY, CLOSED. */
  async has(key: BlockHash): Promise<boolean> {
    checkOpen(this.closed, this.tier);
    checkKeys([key]);
    const [p] = await this.presence([key]);
    return p === true;
  }

  /**
   * How many of `keys`, from the first, exist: one round trip. On a plain Redis a small Lua
   * script walks the keys server-side and stops at the first gap; on a Cluster client it is one
   * `EXISTS` per key, pipelined per node (a multi-key `EXISTS` only counts, and is cross-slot).
   * A value's integrity is checked when it is read, not here.
   * @throws {OffloadError} INVALID_KEY, CLOSED.
   */
  async countPrefix(keys: readonly BlockHash[]): Promise<number> {
    checkOpen(this.closed, this.tier);
    checkKeys(keys);
    if (keys.length === 0) return 0;
    if (this.isCluster) {
      const present = await this.presence(keys);
      let n = 0;
      while (n < present.length && present[n]) n++;
      return n;
    }
    if (!this.isReady) {
      this.unavailable++;
      this.counters.errors++;
      return 0;
    }
    const client = this.client as Redis;
    const redisKeys = keys.map((k) => this.redisKey(k));
    try {
      let n: unknown;
      try {
        n = await client.evalsha(PREFIX_SCRIPT_SHA, redisKeys.length, ...redisKeys);
      } catch (e) {
        if (!String((e as Error).message).includes('NOSCRIPT')) throw e;
        n = await client.eval(PREFIX_SCRIPT, redisKeys.length, ...redisKeys);
      }
      return typeof n === 'number' ? n : 0;
    } catch {
      this.counters.errors++;
      return 0;
    }
  }

  /** @throws {OffloadError} INVALID_KEY, CLOSED. */
  async delete(keys: readonly BlockHash[]): Promise<number> {
    checkOpen(this.closed, this.tier);
    checkKeys(keys);
    const replies = await this.run(keys.length, (p, i) =>
      p.del(this.redisKey(keys[i] as BlockHash)),
    );
    let n = 0;
    for (const [err, r] of replies) {
      if (err !== null) this.counters.errors++;
      else if (r === 1) n++;
    }
    this.counters.deletes += n;
    return n;
  }

  /** Counters since construction and the connection state. */
  stats(): RedisStoreStats {
    return {
      ...this.counters.snapshot(this.tier, undefined, undefined, Number.POSITIVE_INFINITY),
      status: this.client.status,
      unavailable: this.unavailable,
    };
  }

  /** Closes the connection this store opened (a `client` passed in stays open). Idempotent. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (!this.ownsClient) return;
    if (this.client.status === 'ready') {
      await Promise.race([
        this.client.quit().catch(() => undefined),
        new Promise((r) => setTimeout(r, 1000).unref()),
      ]);
    }
    this.client.disconnect();
  }
}
