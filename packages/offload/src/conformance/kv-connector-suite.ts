import { strict as assert } from 'node:assert';
import { type BlockHash, type BlockId, KvCacheManager } from '@kvasir/kv-allocator';
import {
  type KvBlockIo,
  type KvConnector,
  type KvConnectorContext,
  type KvConnectorStep,
  validateKvConnector,
} from '../connectors/kv-connector.js';
import { type ConformanceCheck, sameBytes, seeded, testBytes } from './check.js';

/** What {@link kvConnectorChecks} tests. */
export interface KvConnectorConformanceOptions<B> {
  /** Name of the connector under test (the describe block's). */
  readonly name: string;
  /**
   * A fresh backing (the storage the connector keeps blocks in: a store, a client), shared by
   * the engines of one check, as replicas share a Redis.
   */
  readonly backing: () => Promise<B>;
  /** Makes the connector of one engine over `backing`. */
  readonly create: (context: KvConnectorContext, backing: B) => KvConnector;
  /** Releases a backing once every connector over it is closed. */
  readonly closeBacking?: (backing: B) => Promise<void>;
  /** The connector performs a step's swaps (`swapOut` / `swapIn`). */
  readonly swaps?: boolean;
  /**
   * Prefix blocks one engine computed (seen in `afterForward`) are imported by another engine
   * over the same backing at admission.
   */
  readonly sharesPrefixes?: boolean;
}

const BLOCK_SIZE = 4;
const NUM_BLOCKS = 32;
const BLOCK_BYTES = 64;
const EXTRA_KEYS = { modelId: 'conformance' };

/** A block's true content: what a forward pass computes for the tokens its hash names. */
const contentOf = (hash: BlockHash) => testBytes(hash, BLOCK_BYTES);

/** The device cache as a map; `failing` makes every read and write reject. */
class MemoryDevice implements KvBlockIo {
  readonly blockBytes = BLOCK_BYTES;
  readonly blocks = new Map<BlockId, Uint8Array>();
  constructor(private readonly failing = false) {}
  async readBlocks(blocks: readonly BlockId[]): Promise<Uint8Array[]> {
    if (this.failing) throw new Error('device read failed');
    return blocks.map((b) => (this.blocks.get(b) ?? new Uint8Array(BLOCK_BYTES)).slice());
  }
  async writeBlocks(blocks: readonly BlockId[], data: readonly Uint8Array[]): Promise<void> {
    if (this.failing) throw new Error('device write failed');
    for (let i = 0; i < blocks.length; i++) this.blocks.set(blocks[i]!, data[i]!.slice());
  }
}

/** One engine as a connector sees it: an allocator, a device, and a loop that drains work. */
class TestEngine {
  readonly kvCache = new KvCacheManager({ numBlocks: NUM_BLOCKS, blockSize: BLOCK_SIZE });
  readonly device: MemoryDevice;
  readonly connector: KvConnector;
  #nextSeq = 0;

  constructor(options: KvConnectorConformanceOptions<unknown>, backing: unknown, failing = false) {
    this.device = new MemoryDevice(failing);
    const context: KvConnectorContext = {
      kvCache: this.kvCache,
      device: this.device,
      extraKeys: EXTRA_KEYS,
      wake: () => undefined,
    };
    this.connector = validateKvConnector(options.create(context, backing));
  }

  /** Admits a prompt as the engine does, running `betweenSteps` while it waits. */
  async admit(promptTokens: readonly number[]): Promise<number> {
    const c = this.connector;
    if (!c.onAdmit) return 0;
    let settled = false;
    const admitted = c.onAdmit({ requestId: `r${this.#nextSeq}`, promptTokens }).finally(() => {
      settled = true;
    });
    const deadline = Date.now() + 30_000;
    while (!settled) {
      if (Date.now() > deadline) assert.fail('onAdmit did not settle within 30 s');
      if (c.hasPendingWork) await c.betweenSteps?.();
      else await new Promise((resolve) => setTimeout(resolve, 1));
    }
    const tokens = await admitted;
    assert.ok(Number.isInteger(tokens) && tokens >= 0, `onAdmit resolved to ${tokens}`);
    assert.ok(
      tokens <= promptTokens.length,
      `onAdmit reported ${tokens} tokens of a shorter prompt`,
    );
    return tokens;
  }

  /**
   * Runs a prompt as one step: allocates it after its cached prefix, "computes" its full blocks
   * (writes their true content), shows the step to the connector, and frees the sequence.
   */
  async run(promptTokens: readonly number[]): Promise<void> {
    const kv = this.kvCache;
    const seq = this.#nextSeq++;
    const prefix = kv.findCachedPrefix(promptTokens, EXTRA_KEYS);
    const result = kv.allocateSlots(seq, promptTokens.slice(prefix.numTokens), {
      prefix,
      extraKeys: EXTRA_KEYS,
    });
    assert.ok(result.ok, 'the test engine ran out of blocks');
    const table = kv.blockTable(seq);
    const hashes = kv.blockHashes(promptTokens, EXTRA_KEYS);
    const computed = hashes.slice(prefix.blocks.length);
    await this.device.writeBlocks(
      computed.map((_, i) => table[prefix.blocks.length + i]!),
      computed.map(contentOf),
    );
    const step: KvConnectorStep = {
      rows: [
        {
          requestId: `r${seq}`,
          contextLen: promptTokens.length,
          queryLen: promptTokens.length - prefix.numTokens,
          blockTable: Int32Array.from(table),
        },
      ],
      swapOut: [],
      swapIn: [],
    };
    const lost = await this.connector.beforeForward?.(step);
    assert.ok(!lost || lost.size === 0, 'a step without swaps lost a request');
    this.connector.afterForward?.(step);
    kv.free(seq);
  }

  /** Checks that every cached block holds its true content and that no block is held. */
  checkCache(what: string): void {
    const view = this.kvCache.blocks;
    assert.equal(view.numUsed, 0, `${what}: ${view.numUsed} blocks still held (leaked)`);
    for (let b = 0; b < NUM_BLOCKS; b++) {
      const hash = view.hashOf(b);
      if (hash === undefined) continue;
      assert.ok(
        sameBytes(this.device.blocks.get(b), contentOf(hash)),
        `${what}: block ${b} is cached under ${hash} but holds other bytes`,
      );
    }
  }
}

/** A prompt of `blocks` full blocks and one token more, from `seed`. */
function prompt(seed: number, blocks: number): number[] {
  return Array.from({ length: blocks * BLOCK_SIZE + 1 }, (_, i) => (seed * 7919 + i * 31) % 32_000);
}

/**
 * The `KvConnector` contract as checks: what every connector must do (a valid `v1` object, no
 * leaked blocks, no wrong bytes in the cache, failures as misses), and what it claims to do
 * (swaps, prefixes shared between engines). Run them with {@link runKvConnectorConformance}.
 */
export function kvConnectorChecks<B>(
  options: KvConnectorConformanceOptions<B>,
): ConformanceCheck[] {
  const o = options as KvConnectorConformanceOptions<unknown>;
  const withBacking = async (body: (backing: unknown) => Promise<void>) => {
    const backing = await o.backing();
    try {
      await body(backing);
    } finally {
      await o.closeBacking?.(backing);
    }
  };
  const checks: ConformanceCheck[] = [
    {
      name: 'is a valid v1 connector whose close is idempotent',
      run: () =>
        withBacking(async (backing) => {
          const engine = new TestEngine(o, backing);
          assert.equal(engine.connector.specificationVersion, 'v1');
          await engine.connector.close();
          await engine.connector.close();
        }),
    },
    {
      name: 'admits a prompt nothing holds: 0 tokens, the cache unchanged',
      run: () =>
        withBacking(async (backing) => {
          const engine = new TestEngine(o, backing);
          try {
            assert.equal(await engine.admit(prompt(1, 3)), 0);
            engine.checkCache('after admitting');
            assert.equal(engine.kvCache.blocks.numCached, 0, 'blocks appeared from nowhere');
          } finally {
            await engine.connector.close();
          }
        }),
    },
    {
      name: 'leaks no block and caches no wrong bytes under random traffic',
      run: () =>
        withBacking(async (backing) => {
          const engines = [new TestEngine(o, backing), new TestEngine(o, backing)];
          const rand = seeded(3);
          try {
            for (let i = 0; i < 24; i++) {
              const engine = engines[rand(2)]!;
              const p = prompt(rand(4), 1 + rand(4));
              if (rand(2) === 0) await engine.admit(p);
              await engine.run(p);
              engine.checkCache(`after request ${i}`);
            }
          } finally {
            for (const e of engines) await e.connector.close();
          }
          engines.forEach((e, i) => {
            e.checkCache(`engine ${i} after close`);
          });
        }),
    },
  ];
  if (o.sharesPrefixes) {
    checks.push(
      {
        name: 'imports the prefix another engine computed, with its true bytes',
        run: () =>
          withBacking(async (backing) => {
            const writer = new TestEngine(o, backing);
            const p = prompt(9, 4);
            await writer.run(p);
            await writer.connector.close(); // waits for the writes
            const reader = new TestEngine(o, backing);
            try {
              const tokens = await reader.admit(p);
              assert.equal(tokens, 4 * BLOCK_SIZE, 'onAdmit reported the wrong token count');
              const found = reader.kvCache.findCachedPrefix(p, EXTRA_KEYS, { record: false });
              assert.equal(found.numTokens, 4 * BLOCK_SIZE, 'the imported blocks are not cached');
              reader.checkCache('after the import');
            } finally {
              await reader.connector.close();
            }
          }),
      },
      {
        name: 'treats a failing device as a miss: nothing thrown, leaked or cached',
        run: () =>
          withBacking(async (backing) => {
            const good = new TestEngine(o, backing);
            const p = prompt(11, 3);
            await good.run(p);
            await good.connector.close();
            const broken = new TestEngine(o, backing, true);
            try {
              assert.equal(await broken.admit(p), 0);
              broken.checkCache('after a failed import');
              assert.equal(
                broken.kvCache.blocks.numCached,
                0,
                'a block failed to import is cached',
              );
              // Its own steps' blocks cannot be read back to save: still no throw.
              const q = prompt(12, 2);
              const kv = broken.kvCache;
              const r = kv.allocateSlots('s', q, { extraKeys: EXTRA_KEYS });
              assert.ok(r.ok);
              broken.connector.afterForward?.({
                rows: [
                  {
                    requestId: 's',
                    contextLen: q.length,
                    queryLen: q.length,
                    blockTable: kv.blockTable('s'),
                  },
                ],
                swapOut: [],
                swapIn: [],
              });
              kv.free('s', { keepCached: false });
            } finally {
              await broken.connector.close();
            }
          }),
      },
    );
  }
  if (o.swaps) {
    checks.push(
      {
        name: 'swaps blocks out and back in with their bytes',
        run: () =>
          withBacking(async (backing) => {
            const engine = new TestEngine(o, backing);
            try {
              const d = engine.device;
              await d.writeBlocks([3, 5], [testBytes(3, BLOCK_BYTES), testBytes(5, BLOCK_BYTES)]);
              const out = await engine.connector.beforeForward?.({
                rows: [],
                swapOut: [
                  { requestId: 'a', gpuBlock: 3, hostSlot: 0 },
                  { requestId: 'a', gpuBlock: 5, hostSlot: 1 },
                ],
                swapIn: [],
              });
              assert.ok(!out || out.size === 0, 'a swap-out lost a request');
              await d.writeBlocks(
                [3, 5],
                [new Uint8Array(BLOCK_BYTES), new Uint8Array(BLOCK_BYTES)],
              );
              const lost = await engine.connector.beforeForward?.({
                rows: [],
                swapOut: [],
                swapIn: [
                  { requestId: 'a', gpuBlock: 7, hostSlot: 0 },
                  { requestId: 'a', gpuBlock: 8, hostSlot: 1 },
                ],
              });
              assert.ok(!lost || lost.size === 0, 'a swap-in lost a request');
              assert.ok(sameBytes(d.blocks.get(7), testBytes(3, BLOCK_BYTES)), 'block 7');
              assert.ok(sameBytes(d.blocks.get(8), testBytes(5, BLOCK_BYTES)), 'block 8');
            } finally {
              await engine.connector.close();
            }
          }),
      },
      {
        name: 'reports a request whose swapped block is gone, and writes nothing for it',
        run: () =>
          withBacking(async (backing) => {
            const engine = new TestEngine(o, backing);
            try {
              const lost = await engine.connector.beforeForward?.({
                rows: [],
                swapOut: [],
                swapIn: [{ requestId: 'q', gpuBlock: 4, hostSlot: 9 }],
              });
              assert.deepEqual([...(lost ?? [])], ['q']);
              assert.equal(engine.device.blocks.get(4), undefined, 'wrote a block it did not have');
            } finally {
              await engine.connector.close();
            }
          }),
      },
    );
  }
  return checks;
}
