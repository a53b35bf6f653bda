import { Dealer, Subscriber } from 'zeromq';
import { decodeKvEventBatch, type KvEventBatch } from './kv-event-decoder.js';

/** Options of {@link KvEventSubscriber}. */
export interface KvEventSubscriberOptions {
  /** The replica's PUB endpoint (`--kv-events`, bound by the replica): `tcp://host:5557`. */
  readonly endpoint: string;
  /**
   * The replica's ROUTER endpoint (`--kv-events-replay`): snapshot at start and after a restart,
   * replay of missed batches after a gap. Without it the subscriber only follows the live
   * stream, and a gap stays a gap (reported through `log`).
   */
  readonly replayEndpoint?: string;
  /** Topic to subscribe to (default: every message). */
  readonly topic?: string;
  /** Each batch, in sequence order, once. A snapshot arrives as one batch that starts with `AllBlocksCleared`. */
  readonly onBatch: (batch: KvEventBatch, seq: bigint) => void;
  /** How long a replay or snapshot answer may take (default 5 s). */
  readonly requestTimeoutMs?: number;
  readonly log?: (line: string) => void;
}

/** Counters of one subscriber, for metrics and tests. */
export interface KvEventSubscriberStats {
  /** Live batches applied in order. */
  readonly batches: number;
  /** Snapshots taken (start, replica restarts, gaps a replay could not fill). */
  readonly snapshots: number;
  /** Batches recovered by replay after a gap. */
  readonly replayed: number;
  /** Batches that could not be decoded (skipped, then resynchronised). */
  readonly malformed: number;
  /** Last sequence number applied (−1 before any). */
  readonly sequence: bigint;
}

const END = -1n;

function seqBytes(seq: bigint): Buffer {
  const b = Buffer.alloc(8);
  b.writeBigInt64BE(seq);
  return b;
}

/**
 * Follows one replica's KV event stream (vLLM's format) and hands each batch on exactly once, in
 * order, whatever the network did:
 * - at start, a snapshot (`AllBlocksCleared` + every block the replica holds) through the replay
 *   socket, then the live batches after the snapshot's sequence number;
 * - a gap in sequence numbers (a slow subscriber past the PUB high-water mark, a reconnect): the
 *   missing batches replayed from the replica's buffer, or a new snapshot when they are gone;
 * - a sequence number going back (the replica restarted, its cache empty): a new snapshot.
 * Live batches that arrive while a snapshot or replay is in flight wait in order behind it.
 */
export class KvEventSubscriber {
  readonly #options: KvEventSubscriberOptions;
  readonly #sub: Subscriber;
  readonly #log: (line: string) => void;
  #seq = END;
  #synced = false;
  #queue: [bigint, Buffer][] = [];
  #working = false;
  #closed = false;
  #stats = { batches: 0, snapshots: 0, replayed: 0, malformed: 0 };

  constructor(options: KvEventSubscriberOptions) {
    this.#options = options;
    this.#log = options.log ?? ((line) => process.stderr.write(`[kvasir router] ${line}\n`));
    this.#sub = new Subscriber({ linger: 0 });
  }

  /** Connects and starts following (the first snapshot is asked for at once). */
  start(): void {
    this.#sub.connect(this.#options.endpoint);
    if (this.#options.topic) this.#sub.subscribe(this.#options.topic);
    else this.#sub.subscribe();
    void this.#receive();
    // Without a replay socket the live stream is all there is: follow it from what comes.
    if (this.#options.replayEndpoint === undefined) this.#synced = true;
    void this.#drain();
  }

  /** Counters so far. */
  get stats(): KvEventSubscriberStats {
    return { ...this.#stats, sequence: this.#seq };
  }

  /** Asks for a new snapshot before the next batch (say, when the replica came back). */
  resync(): void {
    if (this.#options.replayEndpoint === undefined) return;
    this.#synced = false;
    void this.#drain();
  }

  async #receive(): Promise<void> {
    try {
      for await (const frames of this.#sub) {
        const seq = frames[1];
        const payload = frames[2];
        if (seq?.length !== 8 || payload === undefined) {
          this.#stats.malformed++;
          continue;
        }
        this.#queue.push([seq.readBigInt64BE(), payload]);
        void this.#drain();
      }
    } catch (error) {
      if (!this.#closed) this.#log(`KV events from ${this.#options.endpoint}: ${String(error)}`);
    }
  }

  /** One worker at a time: snapshots, replays and live batches strictly in order. */
  async #drain(): Promise<void> {
    if (this.#working || this.#closed) return;
    this.#working = true;
    try {
      while (!this.#closed) {
        if (!this.#synced) {
          if (!(await this.#snapshot())) {
            // The replica is unreachable: try again later (its health check will also tell).
            await new Promise((r) => setTimeout(r, 500).unref());
            continue;
          }
        }
        const next = this.#queue.shift();
        if (next === undefined) break;
        const [seq, payload] = next;
        if (seq <= this.#seq) {
          // Nothing applied is ever queued again (a snapshot drops what it covers), so an older
          // number is a new process behind the endpoint: its cache is empty, its counter at 0.
          this.#log(
            `KV events from ${this.#options.endpoint}: sequence went back to ${seq} (replica restarted); resyncing`,
          );
          this.#queue.unshift(next);
          this.#restarted(seq);
          continue;
        }
        if (seq > this.#seq + 1n && this.#options.replayEndpoint !== undefined) {
          // A gap: fetch what was missed; if the replica no longer has it, resnapshot.
          if (!(await this.#replay(this.#seq + 1n, seq))) {
            this.#synced = false;
            this.#queue.unshift(next);
            continue;
          }
        } else if (seq > this.#seq + 1n) {
          this.#log(
            `KV events from ${this.#options.endpoint}: batches ${this.#seq + 1n}..${seq - 1n} lost (no replay endpoint)`,
          );
        }
        this.#apply(seq, payload);
        this.#stats.batches++;
      }
    } finally {
      this.#working = false;
    }
  }

  #restarted(seq: bigint): void {
    if (this.#options.replayEndpoint !== undefined) {
      this.#synced = false;
      return;
    }
    this.#seq = seq - 1n;
    const cleared: KvEventBatch = {
      ts: Date.now() / 1000,
      events: [{ type: 'AllBlocksCleared' }],
      dataParallelRank: null,
    };
    this.#options.onBatch(cleared, this.#seq);
  }

  #apply(seq: bigint, payload: Buffer): boolean {
    this.#seq = seq;
    let batch: KvEventBatch;
    try {
      batch = decodeKvEventBatch(payload);
    } catch (error) {
      this.#stats.malformed++;
      this.#log(
        `KV events from ${this.#options.endpoint}: batch ${seq} skipped (${(error as Error).message})`,
      );
      // What it said is unknown: start again from a snapshot.
      if (this.#options.replayEndpoint !== undefined) this.#synced = false;
      return false;
    }
    this.#options.onBatch(batch, seq);
    return true;
  }

  async #snapshot(): Promise<boolean> {
    const answer = await this.#ask(Buffer.from('snapshot', 'latin1'));
    if (answer === undefined || answer.length !== 1) return false;
    const [seq, payload] = answer[0]!;
    this.#stats.snapshots++;
    this.#synced = true;
    // Everything up to `seq` is in the snapshot; live batches after it follow.
    this.#apply(seq, payload);
    this.#queue = this.#queue.filter(([s]) => s > seq);
    return true;
  }

  /** Replays [from, until); false when the replica cannot give every one of them. */
  async #replay(from: bigint, until: bigint): Promise<boolean> {
    const answer = await this.#ask(seqBytes(from));
    if (answer === undefined) return false;
    const wanted = answer.filter(([s]) => s >= from && s < until);
    if (wanted.length !== Number(until - from) || wanted[0]?.[0] !== from) return false;
    for (const [seq, payload] of wanted) {
      if (!this.#apply(seq, payload)) return true;
      this.#stats.replayed++;
    }
    return true;
  }

  /** One request on a fresh DEALER (a late answer can never be mistaken for the next one's). */
  async #ask(body: Buffer): Promise<[bigint, Buffer][] | undefined> {
    const endpoint = this.#options.replayEndpoint;
    if (endpoint === undefined || this.#closed) return undefined;
    const timeout = this.#options.requestTimeoutMs ?? 5000;
    const dealer = new Dealer({ linger: 0, receiveTimeout: timeout, sendTimeout: timeout });
    try {
      dealer.connect(endpoint);
      await dealer.send([Buffer.alloc(0), body]);
      const out: [bigint, Buffer][] = [];
      for (;;) {
        const frames = await dealer.receive();
        const seq = frames[frames.length - 2];
        const payload = frames[frames.length - 1];
        if (seq?.length !== 8 || payload === undefined) return undefined;
        const s = seq.readBigInt64BE();
        // −1 with an empty payload ends the answer; a snapshot of a replica that has published
        // nothing yet also carries −1, with its (non-empty) batch.
        if (s === END && payload.length === 0) return out;
        out.push([s, payload]);
      }
    } catch {
      return undefined;
    } finally {
      dealer.close();
    }
  }

  /** Stops following; nothing is called after it returns. */
  close(): void {
    this.#closed = true;
    this.#sub.close();
  }
}
