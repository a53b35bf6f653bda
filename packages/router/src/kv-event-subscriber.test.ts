import { pack } from 'msgpackr';
import { afterEach, describe, expect, it } from 'vitest';
import { Publisher, Router } from 'zeromq';
import type { KvEventBatch } from './kv-event-decoder.js';
import { KvEventSubscriber } from './kv-event-subscriber.js';
import { PrefixIndex } from './prefix-index.js';

const seqBytes = (n: bigint) => {
  const b = Buffer.alloc(8);
  b.writeBigInt64BE(n);
  return b;
};
const hash = (n: number) => Buffer.from(n.toString(16).padStart(32, '0'), 'hex');
const key = (n: number) => n.toString(16).padStart(32, '0');

/** A replica's KV event side, as vLLM's publisher behaves: PUB, replay buffer, snapshot. */
class FakeReplica {
  readonly held = new Set<number>();
  readonly buffer: [bigint, Buffer][] = [];
  seq = -1n;
  constructor(
    readonly pub: Publisher,
    readonly router: Router,
  ) {
    void this.#serve();
  }
  static async open(): Promise<FakeReplica> {
    const pub = new Publisher({ linger: 0 });
    await pub.bind('tcp://127.0.0.1:*');
    const router = new Router({ linger: 0 });
    await router.bind('tcp://127.0.0.1:*');
    return new FakeReplica(pub, router);
  }
  get endpoints() {
    return { endpoint: this.pub.lastEndpoint!, replayEndpoint: this.router.lastEndpoint! };
  }
  /** One batch; `drop` keeps it out of the live stream (a lost message) but in the buffer. */
  async publish(stored: number[], removed: number[], drop = false): Promise<void> {
    const events: unknown[] = [];
    if (stored.length > 0)
      events.push(['BlockStored', stored.map(hash), null, [], 16, null, 'GPU', null]);
    if (removed.length > 0) events.push(['BlockRemoved', removed.map(hash), 'GPU']);
    for (const s of stored) this.held.add(s);
    for (const r of removed) this.held.delete(r);
    const payload = pack([Date.now() / 1000, events, 0]);
    const seq = ++this.seq;
    this.buffer.push([seq, payload]);
    if (!drop) await this.pub.send([Buffer.alloc(0), seqBytes(seq), payload]);
  }
  /** A new process behind the same sockets: empty cache, counter from 0. */
  restart(): void {
    this.held.clear();
    this.buffer.length = 0;
    this.seq = -1n;
  }
  async #serve(): Promise<void> {
    try {
      for await (const [id, , body] of this.router) {
        if (body!.toString() === 'snapshot') {
          const events = [
            ['AllBlocksCleared'],
            ...[...this.held].map((h) => [
              'BlockStored',
              [hash(h)],
              null,
              [],
              16,
              null,
              'GPU',
              null,
            ]),
          ];
          await this.router.send([id!, Buffer.alloc(0), seqBytes(this.seq), pack([0, events, 0])]);
        } else {
          const from = body!.readBigInt64BE();
          for (const [s, p] of this.buffer)
            if (s >= from) await this.router.send([id!, Buffer.alloc(0), seqBytes(s), p]);
        }
        await this.router.send([id!, Buffer.alloc(0), seqBytes(-1n), Buffer.alloc(0)]);
      }
    } catch {
      // closed
    }
  }
  close(): void {
    this.pub.close();
    this.router.close();
  }
}

async function until(probe: () => boolean, ms = 10_000): Promise<void> {
  const end = Date.now() + ms;
  while (!probe()) {
    if (Date.now() > end) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, 20));
  }
}

let open: { close(): void }[] = [];
afterEach(() => {
  for (const o of open) o.close();
  open = [];
});

async function follow(replica: FakeReplica) {
  const index = new PrefixIndex();
  const seqs: bigint[] = [];
  const sub = new KvEventSubscriber({
    ...replica.endpoints,
    onBatch: (batch: KvEventBatch, seq) => {
      seqs.push(seq);
      for (const e of batch.events) index.apply('r', e);
    },
    log: () => {},
  });
  open.push(sub);
  sub.start();
  const same = () =>
    [...index.blocks('r')].sort().join() === [...replica.held].map(key).sort().join();
  return { index, seqs, sub, same };
}

describe('KvEventSubscriber on real ZeroMQ sockets', () => {
  it('starts from a snapshot, then follows the live stream in order', async () => {
    const replica = await FakeReplica.open();
    open.push(replica);
    await replica.publish([1, 2, 3], []);
    await replica.publish([4], [2]);
    const f = await follow(replica);
    await until(() => f.sub.stats.snapshots === 1 && f.same());
    expect(f.seqs).toEqual([1n]); // the snapshot carries seq 1, the last published
    for (let i = 5; i < 15; i++) await replica.publish([i], [i - 2]);
    await until(() => f.sub.stats.sequence === replica.seq && f.same());
    // Each batch once, in order, whatever arrived before the subscription took effect.
    expect(f.seqs.slice(1)).toEqual(f.seqs.slice(1).map((_, i) => f.seqs[0]! + 1n + BigInt(i)));
  });

  it('replays batches the live stream lost, and resnapshots when the replica restarted', async () => {
    const replica = await FakeReplica.open();
    open.push(replica);
    const f = await follow(replica);
    await until(() => f.sub.stats.snapshots === 1);
    // Wait until the subscription is live: a batch arrives on the PUB stream.
    let n = 100;
    while (f.sub.stats.batches === 0) {
      await replica.publish([n++], []);
      await new Promise((r) => setTimeout(r, 50));
    }
    await replica.publish([1, 2], []);
    await replica.publish([3], [1], true); // lost on the wire
    await replica.publish([4], [], true); // lost on the wire
    await replica.publish([5], [2]);
    await until(() => f.sub.stats.sequence === replica.seq && f.same());
    expect(f.sub.stats.replayed).toBe(2);
    expect(f.sub.stats.snapshots).toBe(1);

    replica.restart();
    await replica.publish([7, 8], []);
    await until(() => f.sub.stats.snapshots === 2 && f.same());
    expect([...f.index.blocks('r')].sort()).toEqual([key(7), key(8)]);
  });
});
