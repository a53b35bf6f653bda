import type { BlockHash, BlockId, BlockPoolEvent } from '@kvasir/kv-allocator';
import { Packr } from 'msgpackr';
import { Publisher, Router } from 'zeromq';
import {
  bindsEndpoint,
  END_SEQ,
  encodeBatch,
  type KvEvent,
  type KvEventsEncoding,
  seqBytes,
  type WireOptions,
} from './kv-event-wire.js';

/** Options of {@link KvEventPublisher}. */
export interface KvEventPublisherOptions {
  /**
   * ZeroMQ PUB endpoint. As in vLLM: bound when it has `*` or `::` or is `ipc://`/`inproc://`
   * (`tcp://*:5557`), connected otherwise (`tcp://router-host:5557`, a subscriber that binds).
   */
  readonly endpoint: string;
  /** ZeroMQ ROUTER endpoint for replay and snapshot requests (always bound); none when absent. */
  readonly replayEndpoint?: string;
  /** Topic frame of every message (default empty). */
  readonly topic?: string;
  readonly encoding?: KvEventsEncoding;
  /** Tokens per block (`block_size` of `BlockStored`). */
  readonly blockSize: number;
  /** `medium` of the events: the tier the blocks live in (default `GPU`, the engine's pool). */
  readonly medium?: string;
  /** `data_parallel_rank` of every batch (default 0). */
  readonly dataParallelRank?: number;
  /** Batches kept for replay (default 10,000, as vLLM). */
  readonly bufferSteps?: number;
  /** PUB high-water mark (default 100,000, as vLLM): past it a slow subscriber loses batches. */
  readonly hwm?: number;
  /** The blocks the pool really holds now, for snapshots (`KvCacheManager.publishedBlocks`). */
  readonly publishedBlocks: () => readonly (readonly [BlockId, BlockHash])[];
  /** Where failures to send are reported once (default stderr). */
  readonly log?: (line: string) => void;
}

/** The body of a ROUTER request that asks for a full-state snapshot instead of a replay. */
export const SNAPSHOT_REQUEST = 'snapshot';
/** Fallback flush for events that happen outside a step (an abort between steps). */
const IDLE_FLUSH_MS = 50;

/**
 * `medium` of the blocks each offload tier holds, by the tier's name: vLLM's `CPU` for host
 * memory (its CPU offloading connector's name), `DISK` and `REDIS` for the others.
 */
export const TIER_MEDIUM: Readonly<Record<string, string>> = {
  host: 'CPU',
  disk: 'DISK',
  redis: 'REDIS',
};

/**
 * Publishes the engine's KV block events in vLLM's KV event format over ZeroMQ, so an
 * inference gateway's prefix scorer (llm-d), Dynamo's KV router or a `kvasir router` can
 * track which blocks this replica holds.
 *
 * Wire format (vLLM `kv_events.py`): PUB multipart `[topic, seq as 8-byte big-endian,
 * msgpack(batch)]`, a batch `[ts, events, data_parallel_rank]` of `BlockStored(block_hashes,
 * parent_block_hash, token_ids, block_size, lora_id, medium, lora_name)`,
 * `BlockRemoved(block_hashes, medium)` and `AllBlocksCleared`. The ROUTER socket answers a
 * start sequence (8 bytes big-endian) with every buffered `[seq, payload]` from there, and the
 * body `snapshot` with one `[seq, payload]` whose batch is `AllBlocksCleared` then every block
 * the pool holds now (parents first), `seq` being the last published batch (replay from
 * `seq + 1` to follow on); both end with `[-1, ""]`.
 *
 * The allocator's hook only appends to an array; batches are encoded and handed to ZeroMQ when
 * a step ends ({@link flush}), and sends run behind the step, so publishing never blocks one.
 */
export class KvEventPublisher {
  readonly #pub: Publisher;
  readonly #router: Router | undefined;
  readonly #packr = new Packr({ useRecords: false, variableMapSize: true });
  readonly #topic: Buffer;
  readonly #blockSize: number;
  readonly #medium: string;
  readonly #wire: WireOptions;
  readonly #bufferSteps: number;
  readonly #publishedBlocks: KvEventPublisherOptions['publishedBlocks'];
  readonly #log: (line: string) => void;
  /**
   * Parent and tokens of each block the pool or a tier holds, for snapshots and tier events;
   * bounded by the pool's size plus the tiers'.
   */
  readonly #meta = new Map<BlockHash, { parent: BlockHash | undefined; tokens: number[] }>();
  /** Blocks the pool holds (their meta stays while a tier holds them too). */
  readonly #inPool = new Set<BlockHash>();
  /** The offload tiers (media) each block is in, by the tiers' own reports. */
  readonly #inTiers = new Map<BlockHash, Set<string>>();
  #pending: KvEvent[] = [];
  #timer: NodeJS.Timeout | undefined;
  readonly #buffer: [bigint, Buffer][] = [];
  #seq = -1n;
  #sending: Promise<void> = Promise.resolve();
  #failures = 0;
  #closed = false;
  /** The address the PUB socket bound or connected to, and the ROUTER's (ports resolved). */
  readonly endpoints: { readonly pub: string; readonly replay: string | undefined };

  private constructor(
    options: KvEventPublisherOptions,
    pub: Publisher,
    router: Router | undefined,
    endpoints: KvEventPublisher['endpoints'],
  ) {
    this.#pub = pub;
    this.#router = router;
    this.endpoints = endpoints;
    this.#topic = Buffer.from(options.topic ?? '', 'utf8');
    this.#blockSize = options.blockSize;
    this.#medium = options.medium ?? 'GPU';
    this.#wire = {
      encoding: options.encoding ?? 'array',
      blockSize: options.blockSize,
      rank: options.dataParallelRank ?? 0,
    };
    this.#bufferSteps = options.bufferSteps ?? 10_000;
    this.#publishedBlocks = options.publishedBlocks;
    this.#log = options.log ?? ((line) => process.stderr.write(`[kvasir] ${line}\n`));
    if (router !== undefined) void this.#serveReplay(router);
  }

  /**
   * Opens the sockets.
   * @throws Error when an endpoint cannot be bound or is malformed (ZeroMQ's message).
   */
  static async open(options: KvEventPublisherOptions): Promise<KvEventPublisher> {
    const pub = new Publisher({ sendHighWaterMark: options.hwm ?? 100_000, linger: 0 });
    let router: Router | undefined;
    try {
      let pubAddress = options.endpoint;
      if (bindsEndpoint(options.endpoint)) {
        await pub.bind(options.endpoint);
        pubAddress = pub.lastEndpoint ?? options.endpoint;
      } else {
        pub.connect(options.endpoint);
      }
      let replay: string | undefined;
      if (options.replayEndpoint !== undefined) {
        router = new Router({ linger: 0 });
        await router.bind(options.replayEndpoint);
        replay = router.lastEndpoint ?? options.replayEndpoint;
      }
      return new KvEventPublisher(options, pub, router, { pub: pubAddress, replay });
    } catch (error) {
      pub.close();
      router?.close();
      throw error;
    }
  }

  /** The allocator's hook: records the change, nothing more (see `onBlockEvent`). */
  readonly onBlockEvent = (e: BlockPoolEvent): void => {
    if (this.#closed) return;
    if (e.type === 'stored') {
      const tokens = e.tokens === undefined ? [] : [...e.tokens];
      this.#meta.set(e.hash, { parent: e.parent, tokens });
      this.#inPool.add(e.hash);
      this.#pushStored(this.#medium, e.hash, e.parent, tokens);
    } else {
      this.#inPool.delete(e.hash);
      if (!this.#inTiers.has(e.hash)) this.#meta.delete(e.hash);
      this.#pushRemoved(this.#medium, e.hash);
    }
  };

  /**
   * An offload tier (`medium`, see {@link TIER_MEDIUM}) now holds `hashes`. Keys that are not
   * prefix blocks the pool hashed (swapped-out blocks have keys of their own) are ignored, and
   * so is a block already announced in that medium.
   */
  tierStored(medium: string, hashes: readonly BlockHash[]): void {
    if (this.#closed) return;
    for (const hash of hashes) {
      const m = this.#meta.get(hash);
      if (m === undefined) continue;
      let media = this.#inTiers.get(hash);
      if (media === undefined) {
        media = new Set();
        this.#inTiers.set(hash, media);
      }
      if (media.has(medium)) continue;
      media.add(medium);
      this.#pushStored(medium, hash, m.parent, m.tokens);
    }
  }

  /** An offload tier no longer holds `hashes` (evicted, deleted, or found missing on a read). */
  tierRemoved(medium: string, hashes: readonly BlockHash[]): void {
    if (this.#closed) return;
    for (const hash of hashes) {
      const media = this.#inTiers.get(hash);
      if (media === undefined || !media.delete(medium)) continue;
      if (media.size === 0) {
        this.#inTiers.delete(hash);
        if (!this.#inPool.has(hash)) this.#meta.delete(hash);
      }
      this.#pushRemoved(medium, hash);
    }
  }

  #pushStored(medium: string, hash: BlockHash, parent: BlockHash | undefined, tokens: number[]) {
    const last = this.#pending.at(-1);
    // A chain stored in one go is one BlockStored, as vLLM sends a request's new blocks.
    if (
      last?.kind === 'stored' &&
      last.medium === medium &&
      last.s.hashes.at(-1) === parent &&
      last.s.tokens.length === last.s.hashes.length * this.#blockSize &&
      tokens.length === this.#blockSize
    ) {
      last.s.hashes.push(hash);
      last.s.tokens.push(...tokens);
    } else {
      // Its own copy: merging extends it, and the snapshot's record must stay one block.
      this.#pending.push({
        kind: 'stored',
        medium,
        s: { hashes: [hash], parent, tokens: [...tokens] },
      });
    }
    this.#timer ??= setTimeout(() => this.flush(), IDLE_FLUSH_MS).unref();
  }

  #pushRemoved(medium: string, hash: BlockHash) {
    const last = this.#pending.at(-1);
    if (last?.kind === 'removed' && last.medium === medium) last.hashes.push(hash);
    else this.#pending.push({ kind: 'removed', medium, hashes: [hash] });
    this.#timer ??= setTimeout(() => this.flush(), IDLE_FLUSH_MS).unref();
  }

  /** Publishes the events since the last flush as one batch; the engine calls it after each step. */
  flush(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    if (this.#pending.length === 0 || this.#closed) return;
    const events = this.#pending;
    this.#pending = [];
    this.#publish(events);
  }

  /** Last sequence number published (−1 before the first batch). */
  get sequence(): bigint {
    return this.#seq;
  }

  #publish(events: readonly KvEvent[]): void {
    const payload = encodeBatch(this.#packr, events, this.#wire);
    const seq = ++this.#seq;
    this.#buffer.push([seq, payload]);
    if (this.#buffer.length > this.#bufferSteps) this.#buffer.shift();
    const frames = [this.#topic, seqBytes(seq), payload];
    // One send at a time (ZeroMQ's rule), each after the last, none awaited by the step.
    this.#sending = this.#sending
      .then(() => this.#pub.send(frames))
      .catch((error: unknown) => {
        if (this.#failures++ === 0 && !this.#closed) {
          this.#log(
            `KV events: a batch could not be sent (${String(error)}); later ones are tried`,
          );
        }
      });
  }

  /**
   * `AllBlocksCleared`, then every block the pool holds now, each after its parent, then every
   * block each offload tier holds, by medium (parents first within it).
   */
  #snapshot(): Buffer {
    const events: KvEvent[] = [{ kind: 'cleared' }];
    const list = (medium: string, held: ReadonlySet<BlockHash>) => {
      const done = new Set<BlockHash>();
      const visit = (hash: BlockHash): void => {
        if (done.has(hash)) return;
        done.add(hash);
        const m = this.#meta.get(hash);
        if (m?.parent !== undefined && held.has(m.parent)) visit(m.parent);
        events.push({
          kind: 'stored',
          medium,
          s: { hashes: [hash], parent: m?.parent, tokens: m?.tokens ?? [] },
        });
      };
      for (const hash of held) visit(hash);
    };
    list(this.#medium, new Set(this.#publishedBlocks().map(([, hash]) => hash)));
    const byMedium = new Map<string, Set<BlockHash>>();
    for (const [hash, media] of this.#inTiers) {
      for (const medium of media) {
        let set = byMedium.get(medium);
        if (set === undefined) {
          set = new Set();
          byMedium.set(medium, set);
        }
        set.add(hash);
      }
    }
    for (const [medium, held] of byMedium) list(medium, held);
    return encodeBatch(this.#packr, events, this.#wire);
  }

  async #serveReplay(router: Router): Promise<void> {
    try {
      for await (const frames of router) {
        // [identity, "", body] from REQ and vLLM's DEALER clients; [identity, body] without it.
        const id = frames[0]!;
        const delimited = frames.length === 3 && frames[1]!.length === 0;
        const body = frames[frames.length - 1]!;
        const head = delimited ? [id, Buffer.alloc(0)] : [id];
        if (body.toString('latin1') === SNAPSHOT_REQUEST) {
          // Events still pending belong in the snapshot's seq: publish them first.
          this.flush();
          await router.send([...head, seqBytes(this.#seq), this.#snapshot()]);
        } else if (body.length === 8) {
          const from = body.readBigInt64BE();
          for (const [seq, payload] of [...this.#buffer]) {
            if (seq >= from) await router.send([...head, seqBytes(seq), payload]);
          }
        }
        await router.send([...head, END_SEQ, Buffer.alloc(0)]);
      }
    } catch (error) {
      if (!this.#closed) this.#log(`KV events: the replay socket failed (${String(error)})`);
    }
  }

  /** Publishes what is pending, waits for queued sends (bounded), and closes the sockets. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.flush();
    this.#closed = true;
    await Promise.race([this.#sending, new Promise((r) => setTimeout(r, 1000).unref())]);
    this.#pub.close();
    this.#router?.close();
  }
}
