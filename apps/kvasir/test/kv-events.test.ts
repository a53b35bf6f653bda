import { unpack } from 'msgpackr';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Dealer, Subscriber } from 'zeromq';
import { RANDOM_MODEL_NAME } from '../src/default-model.js';
import { eventually, type ServerProcess, startServer } from './harness.js';

// A subscriber written from vLLM's schema (vllm/distributed/kv_events.py, positional structs):
// EventBatch [ts: float, events: list, data_parallel_rank: int | None]; each event a tagged
// array: ["BlockStored", block_hashes, parent_block_hash, token_ids, block_size, lora_id,
// medium, lora_name, ...optional], ["BlockRemoved", block_hashes, medium, ...optional],
// ["AllBlocksCleared"]. Block hashes are bytes.

type Hash = string;
interface Batch {
  readonly seq: bigint;
  readonly raw: Buffer;
  readonly ts: number;
  readonly events: readonly unknown[][];
}

function decode(seq: bigint, raw: Buffer): Batch {
  const batch = unpack(raw) as unknown[];
  expect(Array.isArray(batch)).toBe(true);
  expect(batch).toHaveLength(3);
  const [ts, events, rank] = batch as [number, unknown[][], number];
  expect(typeof ts).toBe('number');
  expect(Math.abs(ts - Date.now() / 1000)).toBeLessThan(600);
  expect(rank).toBe(0);
  for (const e of events) {
    expect(Array.isArray(e)).toBe(true);
    const tag = e[0];
    if (tag === 'BlockStored') {
      expect(e.length).toBeGreaterThanOrEqual(8);
      const [, hashes, parent, tokens, blockSize, loraId, medium, loraName] = e as [
        string,
        Uint8Array[],
        Uint8Array | null,
        number[],
        number,
        null,
        string,
        null,
      ];
      expect(hashes.length).toBeGreaterThan(0);
      for (const h of hashes) expect(h).toBeInstanceOf(Uint8Array);
      for (const h of hashes) expect(h.byteLength).toBe(16);
      expect(parent === null || parent.byteLength === 16).toBe(true);
      expect(blockSize).toBe(16);
      expect(tokens.length === 0 || tokens.length === hashes.length * blockSize).toBe(true);
      expect(tokens.every((t) => Number.isInteger(t) && t >= 0)).toBe(true);
      expect(loraId).toBeNull();
      // The pool, or the host tier (on by default) that prefix blocks are written to.
      expect(['GPU', 'CPU']).toContain(medium);
      expect(loraName).toBeNull();
    } else if (tag === 'BlockRemoved') {
      const [, hashes, medium] = e as [string, Uint8Array[], string];
      expect(hashes.length).toBeGreaterThan(0);
      for (const h of hashes) expect(h.byteLength).toBe(16);
      expect(['GPU', 'CPU']).toContain(medium);
    } else {
      expect(e).toEqual(['AllBlocksCleared']);
    }
  }
  return { seq, raw, ts, events };
}

const hex = (h: Uint8Array): Hash => Buffer.from(h).toString('hex');

/** An index of the blocks a replica holds, per medium (`GPU/…`, `CPU/…`), as a router keeps it. */
function applyTo(index: Set<Hash>, batch: Batch): void {
  for (const e of batch.events) {
    if (e[0] === 'BlockStored') {
      for (const h of e[1] as Uint8Array[]) index.add(`${e[6]}/${hex(h)}`);
    } else if (e[0] === 'BlockRemoved') {
      for (const h of e[1] as Uint8Array[]) index.delete(`${e[2]}/${hex(h)}`);
    } else index.clear();
  }
}

let server: ServerProcess;
let sub: Subscriber;
let subAddress: string;
let replayAddress: string;
const live: Batch[] = [];

beforeAll(async () => {
  // The subscriber binds (a router's stable address) and the replica connects to it, vLLM's
  // rule for an endpoint without `*`; the replay socket binds on a port the replica picks.
  sub = new Subscriber();
  await sub.bind('tcp://127.0.0.1:*');
  sub.subscribe();
  subAddress = sub.lastEndpoint!;
  void (async () => {
    for await (const [topic, seq, payload] of sub) {
      expect(topic!.byteLength).toBe(0);
      expect(seq!.byteLength).toBe(8);
      live.push(decode(seq!.readBigInt64BE(), payload!));
    }
  })();
  server = await startServer([
    '--backend',
    'cpu',
    '--max-num-seqs',
    '4',
    '--block-size',
    '16',
    '--num-gpu-blocks',
    '24',
    '--kv-events',
    subAddress,
    '--kv-events-replay',
    'tcp://127.0.0.1:*',
  ]);
  replayAddress = /KV events .*replay (tcp:\/\/\S+)/.exec(server.output())![1]!;
});

afterAll(async () => {
  sub?.close();
  expect(await server.stop()).toBe(0);
});

/** Sends one request to the replay socket and collects the answer up to the −1 marker. */
async function ask(body: Buffer): Promise<{ seq: bigint; payload: Buffer }[]> {
  const d = new Dealer({ receiveTimeout: 10_000, linger: 0 });
  d.connect(replayAddress);
  try {
    await d.send([Buffer.alloc(0), body]);
    const out: { seq: bigint; payload: Buffer }[] = [];
    for (;;) {
      const [empty, seq, payload] = await d.receive();
      expect(empty!.byteLength).toBe(0);
      const s = seq!.readBigInt64BE();
      if (s === -1n) {
        expect(payload!.byteLength).toBe(0);
        return out;
      }
      out.push({ seq: s, payload: payload! });
    }
  } finally {
    d.close();
  }
}

function seqBuf(n: bigint): Buffer {
  const b = Buffer.alloc(8);
  b.writeBigInt64BE(n);
  return b;
}

describe('--kv-events: block events in vLLM format over ZeroMQ, from a real kvasir serve', () => {
  it('publishes every batch, replays the same bytes, and events rebuild the real block set', async () => {
    // Random traffic over a few shared prefixes: 24 blocks of 16 tokens force evictions.
    let state = 7;
    const rand = (n: number) => {
      state = (state * 1103515245 + 12345) % 2 ** 31;
      return state % n;
    };
    const system = ['You are a terse assistant. ', 'Answer in French only please. ', 'Be kind. '];
    for (let round = 0; round < 4; round++) {
      await Promise.all(
        Array.from({ length: 4 }, (_, i) =>
          server.client.completions.create({
            model: RANDOM_MODEL_NAME,
            prompt: `${system[rand(3)]!.repeat(4)} question ${round}-${i}-${rand(1000)}`,
            max_tokens: 4 + rand(24),
            temperature: 0,
          }),
        ),
      );
    }
    // Batches go out after each step; wait until the stream is quiet.
    let seen = -1;
    expect(
      await eventually(async () => {
        const quiet = live.length === seen;
        seen = live.length;
        await new Promise((r) => setTimeout(r, 100));
        return quiet && seen > 0;
      }),
    ).toBe(true);

    // Sequence numbers are consecutive from the first batch received.
    for (let i = 1; i < live.length; i++) expect(live[i]!.seq).toBe(live[i - 1]!.seq + 1n);

    // Replay from 0 gives every batch, the received ones byte for byte.
    const replay = await ask(seqBuf(0n));
    expect(replay.map((r) => r.seq)).toEqual(replay.map((_, i) => BigInt(i)));
    expect(replay.length).toBeGreaterThanOrEqual(live.length);
    for (const b of live) expect(replay[Number(b.seq)]!.payload.equals(b.raw)).toBe(true);
    // From a later sequence number: that suffix, and nothing before it.
    const from = BigInt(Math.floor(replay.length / 2));
    const tail = await ask(seqBuf(from));
    expect(tail.map((r) => r.seq)).toEqual(replay.slice(Number(from)).map((r) => r.seq));

    // The index rebuilt from events equals the snapshot of the pool's real hash index.
    const batches = replay.map((r) => decode(r.seq, r.payload));
    const index = new Set<Hash>();
    for (const b of batches) applyTo(index, b);
    const removed = batches.flatMap((b) => b.events.filter((e) => e[0] === 'BlockRemoved'));
    expect(removed.length).toBeGreaterThan(0); // the traffic did evict blocks
    const snap = await ask(Buffer.from('snapshot'));
    expect(snap).toHaveLength(1);
    expect(snap[0]!.seq).toBe(BigInt(replay.length - 1));
    const snapshot = decode(snap[0]!.seq, snap[0]!.payload);
    expect(snapshot.events[0]).toEqual(['AllBlocksCleared']);
    const real = new Set<Hash>();
    applyTo(real, snapshot);
    expect(real.size).toBeGreaterThan(0);
    expect([...index].sort()).toEqual([...real].sort());
    // Prefix blocks also went to the host tier, announced under its own medium.
    expect([...real].some((k) => k.startsWith('CPU/'))).toBe(true);
    // Parents come before children in the snapshot, so a router can link the chains.
    const seenHashes = new Set<Hash>();
    for (const e of snapshot.events.slice(1)) {
      const parent = e[2] as Uint8Array | null;
      const key = (h: Uint8Array) => `${e[6]}/${hex(h)}`;
      if (parent !== null && real.has(key(parent))) expect(seenHashes.has(key(parent))).toBe(true);
      seenHashes.add(key((e[1] as Uint8Array[])[0]!));
    }
    // The pool's own count agrees: cached + used blocks with a hash.
    const m = await server.metrics();
    const inPool = [...real].filter((k) => k.startsWith('GPU/')).length;
    expect(inPool).toBeLessThanOrEqual(m.get('kvasir_kv_blocks{state="total"}')!);
  });
});
