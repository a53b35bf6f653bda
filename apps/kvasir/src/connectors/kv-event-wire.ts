// vLLM's KV event wire format (`kv_events.py`): what one batch of block events is, how it is
// encoded (positional structs or tagged maps, msgpack), and the framing around it.
import type { BlockHash } from '@kvasir/kv-allocator';
import type { Packr } from 'msgpackr';

/**
 * How event batches are encoded. `array`: vLLM's positional structs (`[ts, events, rank]`, each
 * event `["BlockStored", ...fields]`), the format before vLLM's tagged-map change and still
 * SGLang's; `map`: tagged maps (`{ts, events, data_parallel_rank}`, each event
 * `{type: "BlockStored", ...}`), vLLM's current one. Consumers (llm-d, Dynamo) read both.
 */
export type KvEventsEncoding = 'array' | 'map';

/** Sequence number that ends a replay or snapshot answer (−1, 8 bytes big-endian). */
export const END_SEQ = seqBytes(-1n);

/** A sequence number as 8 bytes, big-endian. */
export function seqBytes(seq: bigint): Buffer {
  const b = Buffer.alloc(8);
  b.writeBigInt64BE(seq);
  return b;
}

/**
 * Kvasir's block hashes on the wire: the 128-bit chain hash (SHA-256 of the parent hash, the
 * block's token ids and extra keys, truncated) as 16 raw bytes, most significant first, a
 * msgpack `bin` like vLLM's bytes hashes.
 */
export function wireHash(hash: BlockHash): Buffer {
  return Buffer.from(hash, 'hex');
}

/** True when vLLM's rule binds this endpoint rather than connecting to it. */
export function bindsEndpoint(endpoint: string): boolean {
  return (
    endpoint.includes('*') ||
    endpoint.includes('::') ||
    endpoint.startsWith('ipc://') ||
    endpoint.startsWith('inproc://')
  );
}

/** Blocks stored in one go: a chain, its first block's parent, and their tokens. */
export type Stored = { hashes: BlockHash[]; parent: BlockHash | undefined; tokens: number[] };
/** One event of a batch. */
export type KvEvent =
  | { kind: 'stored'; s: Stored; medium: string }
  | { kind: 'removed'; hashes: BlockHash[]; medium: string }
  | { kind: 'cleared' };

/** What every event of a batch carries besides its own fields. */
export interface WireOptions {
  readonly encoding: KvEventsEncoding;
  /** Tokens per block (`block_size` of `BlockStored`). */
  readonly blockSize: number;
  /** `data_parallel_rank` of the batch. */
  readonly rank: number;
}

/** One batch, `[ts, events, rank]` or `{ts, events, data_parallel_rank}`, packed. */
export function encodeBatch(packr: Packr, events: readonly KvEvent[], wire: WireOptions): Buffer {
  const ts = Date.now() / 1000;
  const encoded = events.map((e) => encodeEvent(e, wire));
  const batch =
    wire.encoding === 'array'
      ? [ts, encoded, wire.rank]
      : { ts, events: encoded, data_parallel_rank: wire.rank };
  return packr.pack(batch);
}

function encodeEvent(e: KvEvent, wire: WireOptions): unknown {
  const map = wire.encoding === 'map';
  if (e.kind === 'cleared') return map ? { type: 'AllBlocksCleared' } : ['AllBlocksCleared'];
  if (e.kind === 'removed') {
    const hashes = e.hashes.map(wireHash);
    return map
      ? { type: 'BlockRemoved', block_hashes: hashes, medium: e.medium }
      : ['BlockRemoved', hashes, e.medium];
  }
  const hashes = e.s.hashes.map(wireHash);
  const parent = e.s.parent === undefined ? null : wireHash(e.s.parent);
  return map
    ? {
        type: 'BlockStored',
        block_hashes: hashes,
        parent_block_hash: parent,
        token_ids: e.s.tokens,
        block_size: wire.blockSize,
        lora_id: null,
        medium: e.medium,
        lora_name: null,
      }
    : ['BlockStored', hashes, parent, e.s.tokens, wire.blockSize, null, e.medium, null];
}
