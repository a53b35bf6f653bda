import { unpack } from 'msgpackr';
import { afterEach, describe, expect, it } from 'vitest';
import { Dealer } from 'zeromq';
import { wireHash } from './kv-event-wire.js';
import { KvEventPublisher } from './kv-events.js';

const A = '0123456789abcdef0123456789abcdef';
const B = 'fedcba9876543210fedcba9876543210';
let publisher: KvEventPublisher | undefined;
afterEach(async () => {
  await publisher?.close();
});

async function replayFrom(address: string, from: bigint): Promise<Buffer[]> {
  const d = new Dealer({ receiveTimeout: 5000, linger: 0 });
  d.connect(address);
  const start = Buffer.alloc(8);
  start.writeBigInt64BE(from);
  await d.send([Buffer.alloc(0), start]);
  const out: Buffer[] = [];
  for (;;) {
    const [, seq, payload] = await d.receive();
    if (seq!.readBigInt64BE() === -1n) break;
    out.push(payload!);
  }
  d.close();
  return out;
}

describe('KvEventPublisher (real ZeroMQ sockets on loopback)', () => {
  it('encodes tagged maps with --kv-events-encoding map, a stored chain as one BlockStored', async () => {
    publisher = await KvEventPublisher.open({
      endpoint: 'tcp://127.0.0.1:*',
      replayEndpoint: 'tcp://127.0.0.1:*',
      encoding: 'map',
      blockSize: 2,
      publishedBlocks: () => [],
    });
    publisher.onBlockEvent({
      type: 'stored',
      block: 0,
      hash: A,
      parent: undefined,
      tokens: [1, 2],
    });
    publisher.onBlockEvent({ type: 'stored', block: 1, hash: B, parent: A, tokens: [3, 4] });
    publisher.flush();
    publisher.onBlockEvent({ type: 'removed', block: 1, hash: B });
    publisher.flush();
    const batches = (await replayFrom(publisher.endpoints.replay!, 0n)).map((b) => unpack(b));
    expect(batches).toHaveLength(2);
    expect(batches[0]).toMatchObject({ data_parallel_rank: 0, ts: expect.any(Number) });
    expect(batches[0].events).toEqual([
      {
        type: 'BlockStored',
        block_hashes: [wireHash(A), wireHash(B)],
        parent_block_hash: null,
        token_ids: [1, 2, 3, 4],
        block_size: 2,
        lora_id: null,
        medium: 'GPU',
        lora_name: null,
      },
    ]);
    expect(batches[1].events).toEqual([
      { type: 'BlockRemoved', block_hashes: [wireHash(B)], medium: 'GPU' },
    ]);
    expect(publisher.sequence).toBe(1n);
  });

  it('announces offload tiers under their own medium, only for blocks the pool hashed, and lists them in snapshots', async () => {
    publisher = await KvEventPublisher.open({
      endpoint: 'tcp://127.0.0.1:*',
      replayEndpoint: 'tcp://127.0.0.1:*',
      encoding: 'map',
      blockSize: 2,
      publishedBlocks: () => (gpu.has(B) ? [[1, B]] : []),
    });
    const gpu = new Set([A, B]);
    const SWAP = '5'.repeat(32); // a swapped-out block's key: not a prefix block
    publisher.onBlockEvent({
      type: 'stored',
      block: 0,
      hash: A,
      parent: undefined,
      tokens: [1, 2],
    });
    publisher.onBlockEvent({ type: 'stored', block: 1, hash: B, parent: A, tokens: [3, 4] });
    publisher.flush();
    publisher.tierStored('CPU', [A, B, SWAP]);
    publisher.tierStored('CPU', [A]); // already announced there
    publisher.flush();
    gpu.delete(A);
    publisher.onBlockEvent({ type: 'removed', block: 0, hash: A });
    publisher.flush();
    const batches = (await replayFrom(publisher.endpoints.replay!, 0n)).map((b) => unpack(b));
    expect(batches[1].events).toEqual([
      {
        type: 'BlockStored',
        block_hashes: [wireHash(A), wireHash(B)],
        parent_block_hash: null,
        token_ids: [1, 2, 3, 4],
        block_size: 2,
        lora_id: null,
        medium: 'CPU',
        lora_name: null,
      },
    ]);
    expect(batches[2].events).toEqual([
      { type: 'BlockRemoved', block_hashes: [wireHash(A)], medium: 'GPU' },
    ]);
    // The snapshot: B in the pool, A and B in the host tier (A kept its parent and tokens).
    const d = new Dealer({ receiveTimeout: 5000, linger: 0 });
    d.connect(publisher.endpoints.replay!);
    await d.send([Buffer.alloc(0), Buffer.from('snapshot')]);
    const [, , payload] = await d.receive();
    d.close();
    const snap = unpack(payload!).events as {
      type: string;
      block_hashes?: Buffer[];
      medium?: string;
      token_ids?: number[];
    }[];
    expect(
      snap.map((e) => [
        e.type,
        e.medium,
        e.block_hashes?.map((h) => h.toString('hex')),
        e.token_ids,
      ]),
    ).toEqual([
      ['AllBlocksCleared', undefined, undefined, undefined],
      ['BlockStored', 'GPU', [B], [3, 4]],
      ['BlockStored', 'CPU', [A], [1, 2]],
      ['BlockStored', 'CPU', [B], [3, 4]],
    ]);
    // Gone from the tier too: removed there, forgotten, and not announced again.
    publisher.tierRemoved('CPU', [A, SWAP]);
    publisher.flush();
    publisher.tierStored('DISK', [A]);
    publisher.flush();
    const after = (await replayFrom(publisher.endpoints.replay!, 3n)).map((b) => unpack(b));
    expect(after.map((b) => b.events)).toEqual([
      [{ type: 'BlockRemoved', block_hashes: [wireHash(A)], medium: 'CPU' }],
    ]);
  });

  it('refuses an endpoint ZeroMQ cannot bind, closing what it opened', async () => {
    await expect(
      KvEventPublisher.open({
        endpoint: 'tcp://*:notaport',
        blockSize: 2,
        publishedBlocks: () => [],
      }),
    ).rejects.toThrow();
  });
});
