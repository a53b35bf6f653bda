import { createHash } from 'node:crypto';
import { OffloadError } from '../errors.js';
import type { TieredStore } from '../tiered-store.js';
import {
  KV_CONNECTOR_SPECIFICATION_VERSION,
  type KvBlockIo,
  type KvConnector,
  type KvConnectorStep,
} from './kv-connector.js';

/** How long a swap-in waits for a block: it has no other copy, so no short deadline. */
const SWAP_IN_DEADLINE_MS = 60_000;

function swapKey(engineId: string, slot: number, generation: number): string {
  return createHash('sha256')
    .update(`swap:${engineId}:${slot}:${generation}`)
    .digest('hex')
    .slice(0, 32);
}

/** What a {@link SwapConnector} works with. */
export interface SwapConnectorOptions {
  /** The device cache swapped blocks are read from and written back to. */
  readonly device: KvBlockIo;
  /** Where they are kept meanwhile. */
  readonly store: TieredStore;
}

/**
 * Swap preemption through the offload store: a preempted sequence's blocks are read back from
 * the runner and stored under a fresh key per swap-out (so a late promotion or demotion of an
 * old copy can never be read back for a reused host slot), and written back when it resumes.
 */
export class SwapConnector implements KvConnector {
  readonly specificationVersion = KV_CONNECTOR_SPECIFICATION_VERSION;
  readonly name = 'swap';
  readonly #device: KvBlockIo;
  readonly #store: TieredStore;
  readonly #engineId = `${process.pid}-${Date.now()}`;
  /** Host slot → key of the block swapped into it. */
  readonly #keys = new Map<number, string>();
  #generation = 0;
  #hits = 0;
  #misses = 0;

  constructor(options: SwapConnectorOptions) {
    this.#device = options.device;
    this.#store = options.store;
  }

  /** Swap-ins served by the store, and ones it could not serve. */
  stats(): { hits: number; misses: number } {
    return { hits: this.#hits, misses: this.#misses };
  }

  /** Swaps the step's blocks out to the store, then the resumed ones back in. */
  async beforeForward(plan: KvConnectorStep): Promise<ReadonlySet<string> | undefined> {
    if (plan.swapOut.length > 0) await this.#swapOut(plan);
    return plan.swapIn.length > 0 ? this.#swapIn(plan) : undefined;
  }

  /** Nothing to wait for: swaps complete within their step. */
  async close(): Promise<void> {}

  async #swapOut(plan: KvConnectorStep): Promise<void> {
    const data = await this.#device.readBlocks(plan.swapOut.map((t) => t.gpuBlock));
    const entries = plan.swapOut.map((t, i) => {
      const key = swapKey(this.#engineId, t.hostSlot, ++this.#generation);
      this.#keys.set(t.hostSlot, key);
      return { key, value: data[i]! };
    });
    const stored = await this.#store.putMany(entries);
    if (stored !== entries.length) {
      throw new OffloadError(
        'SWAP_LOST',
        `the offload store kept ${stored} of ${entries.length} swapped-out blocks`,
      );
    }
  }

  /** Copies swapped blocks back; returns the requests whose blocks the store no longer had. */
  async #swapIn(plan: KvConnectorStep): Promise<Set<string> | undefined> {
    // A slot may appear more than once (blocks shared by forked sequences); an unknown slot is a
    // lost block like any other miss.
    const keys = plan.swapIn.map((t) => this.#keys.get(t.hostSlot));
    const known = [...new Set(keys.filter((k): k is string => k !== undefined))];
    const fetched = await this.#store.fetch(known, { deadlineMs: SWAP_IN_DEADLINE_MS });
    const byKey = new Map(known.map((k, i) => [k, fetched.values[i]]));
    const blocks: number[] = [];
    const data: Uint8Array[] = [];
    const lost = new Set<string>();
    plan.swapIn.forEach((t, i) => {
      const key = keys[i];
      const value = key === undefined ? undefined : byKey.get(key);
      if (value === undefined) lost.add(t.requestId);
      else {
        blocks.push(t.gpuBlock);
        data.push(value);
      }
    });
    this.#hits += data.length;
    this.#misses += plan.swapIn.length - data.length;
    await this.#device.writeBlocks(blocks, data);
    // The slot will be reused; drop the copy so it does not take the tier's budget.
    for (const t of plan.swapIn) this.#keys.delete(t.hostSlot);
    await this.#store.delete(known);
    return lost.size > 0 ? lost : undefined;
  }
}
