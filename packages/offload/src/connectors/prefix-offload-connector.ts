import type { BlockHash } from '@kvasir/kv-allocator';
import type { TieredStore } from '../tiered-store.js';
import {
  KV_CONNECTOR_SPECIFICATION_VERSION,
  type KvConnector,
  type KvConnectorContext,
  type KvConnectorRequest,
  type KvConnectorStep,
} from './kv-connector.js';

/** Counters of prefix offload (blocks written to and imported from the offload tiers). */
export interface PrefixOffloadStats {
  /** Full blocks written to the offload store after the step that filled them. */
  readonly storedBlocks: number;
  /** Blocks fetched from the offload store and imported into the GPU prefix cache. */
  readonly importedBlocks: number;
  /** Tokens of those blocks (what later prefix hits can reuse). */
  readonly importedTokens: number;
  /** Imports given up (no room, late or missing blocks, stale local prefix). */
  readonly skippedImports: number;
  /** Failed reads, writes and lookups (never thrown into the engine). */
  readonly errors: number;
  /**
   * Blocks a lookup found listed but could not read back (deleted, or corrupt and dropped by
   * the tier); each is written again the next time it is full.
   */
  readonly missingBlocks: number;
}

/** The counters of an engine without prefix offload. */
export const NO_PREFIX_OFFLOAD: PrefixOffloadStats = {
  storedBlocks: 0,
  importedBlocks: 0,
  importedTokens: 0,
  skippedImports: 0,
  errors: 0,
  missingBlocks: 0,
};

/** Blocks fetched for one prompt, waiting to be imported between engine steps. */
interface PendingImport {
  readonly tokens: readonly number[];
  /** Index of the first fetched block in the prompt's block chain. */
  readonly firstBlock: number;
  readonly keys: readonly BlockHash[];
  readonly values: readonly Uint8Array[];
  /** Settles the admission with the prompt tokens imported (0 for none). */
  readonly done: (tokens: number) => void;
}

/** Deadline of a prefix lookup plus fetch: past it the request just recomputes. */
const PREFIX_FETCH_DEADLINE_MS = 2_000;
/** Hashes remembered as already written, so a hot prefix is not rewritten every request. */
const STORED_HASHES_LIMIT = 16_384;

/** What a {@link PrefixOffloadConnector} works with: the engine's context and the store. */
export interface PrefixOffloadContext extends KvConnectorContext {
  /** Where prefix blocks are written and looked up (shared with other replicas through Redis). */
  readonly store: TieredStore;
}

/**
 * Prefix blocks shared through the offload tiers: every block a step fills is written under its
 * prefix hash after the forward pass, and at admission the prompt's blocks beyond the local hit
 * are looked up, fetched within a deadline and imported into the cache between steps (into
 * blocks the allocator reserves for them, published once written), so the scheduler's prefix
 * lookup finds them. Every failure is a miss: the request recomputes.
 */
export class PrefixOffloadConnector implements KvConnector {
  readonly specificationVersion = KV_CONNECTOR_SPECIFICATION_VERSION;
  readonly name = 'prefix-offload';
  readonly #c: PrefixOffloadContext;
  readonly #blockSize: number;
  /** Recently written block hashes, oldest first (bounded). */
  readonly #storedHashes = new Set<BlockHash>();
  /** Writes in flight (awaited by {@link close} before the store closes). */
  readonly #pendingWrites = new Set<Promise<void>>();
  #imports: PendingImport[] = [];
  #closed = false;
  #stored = 0;
  #imported = 0;
  #skipped = 0;
  #errors = 0;
  #missing = 0;

  constructor(context: PrefixOffloadContext) {
    this.#c = context;
    this.#blockSize = context.kvCache.blockSize;
  }

  /** Counters since construction (see {@link PrefixOffloadStats}). */
  stats(): PrefixOffloadStats {
    return {
      storedBlocks: this.#stored,
      importedBlocks: this.#imported,
      importedTokens: this.#imported * this.#blockSize,
      skippedImports: this.#skipped,
      errors: this.#errors,
      missingBlocks: this.#missing,
    };
  }

  /** True while fetched blocks wait to be imported between steps. */
  get hasPendingWork(): boolean {
    return this.#imports.length > 0;
  }

  /**
   * Writes the blocks that became full in this step under their prefix hash. Not awaited: the
   * read is queued on the runner after this step's forward (so it sees exactly that content)
   * and before any later write into the block.
   */
  afterForward(plan: KvConnectorStep): void {
    const bs = this.#blockSize;
    const view = this.#c.kvCache.blocks;
    const blocks: number[] = [];
    const keys: BlockHash[] = [];
    for (const row of plan.rows) {
      const first = row.contextLen - row.queryLen;
      // Block j is newly full when its last slot, (j + 1)·bs − 1, was computed this step.
      for (let j = Math.floor(first / bs); (j + 1) * bs <= row.contextLen; j++) {
        if ((j + 1) * bs - 1 < first) continue;
        const block = row.blockTable[j];
        if (block === undefined) continue;
        const hash = view.hashOf(block);
        if (hash === undefined || this.#storedHashes.has(hash)) continue;
        this.#remember(hash);
        blocks.push(block);
        keys.push(hash);
      }
    }
    if (blocks.length === 0) return;
    const forget = () => {
      this.#errors++;
      for (const k of keys) this.#storedHashes.delete(k);
    };
    const write = this.#c.device
      .readBlocks(blocks)
      .then((data) => this.#c.store.putMany(keys.map((key, i) => ({ key, value: data[i]! }))))
      .then((stored) => {
        this.#stored += stored;
        if (stored < keys.length) forget();
      })
      .catch(forget);
    this.#pendingWrites.add(write);
    void write.finally(() => this.#pendingWrites.delete(write));
  }

  /**
   * Looks the prompt's blocks beyond the local hit up in the store, fetches the ones present
   * within a deadline and waits until the engine loop has imported them (or given up).
   * Resolves to the prompt tokens imported; never rejects.
   */
  async onAdmit(request: KvConnectorRequest): Promise<number> {
    const tokens = request.promptTokens;
    try {
      const bs = this.#blockSize;
      const kv = this.#c.kvCache;
      // At least the last prompt token is computed: its logits are needed.
      const maxBlocks = Math.floor((tokens.length - 1) / bs);
      if (maxBlocks <= 0) return 0;
      const hashes = kv.blockHashes(tokens, this.#c.extraKeys).slice(0, maxBlocks);
      const local = kv.findCachedPrefix(tokens, this.#c.extraKeys, { record: false });
      const firstBlock = local.blocks.length;
      const rest = hashes.slice(firstBlock);
      if (rest.length === 0) return 0;
      const started = performance.now();
      const store = this.#c.store;
      const m = await store.countPrefix(rest, { deadlineMs: PREFIX_FETCH_DEADLINE_MS });
      // A block this process wrote that the tiers no longer have (deleted, or found corrupt and
      // dropped) is written again the next time it is full.
      if (m < rest.length) this.#storedHashes.delete(rest[m]!);
      if (m <= 0) return 0;
      const left = PREFIX_FETCH_DEADLINE_MS - (performance.now() - started);
      if (left <= 0) {
        this.#skipped++;
        return 0;
      }
      const keys = rest.slice(0, m);
      const fetched = await store.fetch(keys, { deadlineMs: left });
      const blockBytes = this.#c.device.blockBytes;
      const usable = (v: Uint8Array | undefined): v is Uint8Array =>
        v !== undefined && v.byteLength === blockBytes;
      // Past the deadline a miss may only be late, not lost.
      if (fetched.expired === 0) {
        fetched.values.forEach((v, i) => {
          if (usable(v)) return;
          this.#missing++;
          this.#storedHashes.delete(keys[i]!);
        });
      }
      // Only a leading run of well-sized blocks can extend the prefix.
      const values: Uint8Array[] = [];
      for (const v of fetched.values) {
        if (!usable(v)) break;
        values.push(v);
      }
      if (values.length === 0) {
        this.#skipped++;
        return 0;
      }
      if (this.#closed) return 0;
      return await new Promise<number>((resolve) => {
        this.#imports.push({
          tokens,
          firstBlock,
          keys: keys.slice(0, values.length),
          values,
          done: resolve,
        });
        this.#c.wake();
      });
    } catch {
      this.#errors++;
      return 0;
    }
  }

  /** Imports the blocks fetched for admitted prompts. */
  async betweenSteps(): Promise<void> {
    const pending = this.#imports;
    this.#imports = [];
    for (const job of pending) {
      let imported = 0;
      try {
        imported = await this.#importOne(job);
      } catch {
        // A failed import only means recompute; #importOne has already freed what it took.
        this.#errors++;
      } finally {
        job.done(imported * this.#blockSize);
      }
    }
  }

  /** Gives up imports not yet run and waits for the writes in flight. */
  async close(): Promise<void> {
    this.#closed = true;
    const pending = this.#imports;
    this.#imports = [];
    for (const job of pending) job.done(0);
    // Blocks being written must reach the store before the caller closes it.
    await Promise.all([...this.#pendingWrites]);
  }

  /**
   * Puts fetched blocks into the cache: the allocator reserves blocks for the chain after the
   * local prefix (which may have grown or shrunk since the lookup), the bytes are written, and
   * committing publishes them as cached prefix blocks for the request's own lookup. Returns the
   * blocks imported.
   */
  async #importOne(job: PendingImport): Promise<number> {
    const kv = this.#c.kvCache;
    const bs = this.#blockSize;
    const end = job.firstBlock + job.keys.length;
    const reserved = kv.reserveExternal(job.tokens.slice(0, end * bs), {
      extraKeys: this.#c.extraKeys,
      maxBlocks: job.keys.length,
    });
    if (!reserved) return 0;
    const offset = reserved.firstBlock - job.firstBlock;
    const matches =
      offset >= 0 && reserved.hashes.every((hash, i) => hash === job.keys[offset + i]);
    if (!matches) {
      // The local prefix shrank below what was fetched: the fetched blocks cannot chain on.
      kv.abortExternal(reserved);
      this.#skipped++;
      return 0;
    }
    try {
      await this.#c.device.writeBlocks(
        reserved.blocks,
        job.values.slice(offset, offset + reserved.blocks.length),
      );
    } catch (error) {
      kv.abortExternal(reserved);
      this.#skipped++;
      throw error;
    }
    kv.commitExternal(reserved);
    this.#imported += reserved.blocks.length;
    return reserved.blocks.length;
  }

  #remember(hash: BlockHash): void {
    this.#storedHashes.add(hash);
    if (this.#storedHashes.size > STORED_HASHES_LIMIT) {
      const oldest = this.#storedHashes.values().next().value;
      if (oldest !== undefined) this.#storedHashes.delete(oldest);
    }
  }
}
