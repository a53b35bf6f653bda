import { SchedulerError } from './errors.js';

/**
 * A fixed set of host-memory slots, each holding one swapped-out KV block. The engine maps slot
 * indices onto its host tier (@kvasir/offload `HostMemoryStore`, or a pinned buffer).
 */
export class HostSlotPool {
  /** Slots in all (`hostSwapBlocks`). */
  readonly capacity: number;
  private readonly freeList: Int32Array;
  private numFreeSlots: number;

  /** @throws {SchedulerError} INVALID_CONFIG for a negative or non-integer capacity. */
  constructor(capacity: number) {
    if (!Number.isInteger(capacity) || capacity < 0) {
      throw new SchedulerError(
        'INVALID_CONFIG',
        `hostSwapBlocks must be an integer ≥ 0, got ${String(capacity)}`,
      );
    }
    this.capacity = capacity;
    this.freeList = new Int32Array(capacity);
    // Hand out low slots first: deterministic, and dense for the host tier.
    for (let i = 0; i < capacity; i++) this.freeList[i] = capacity - 1 - i;
    this.numFreeSlots = capacity;
  }

  /** Slots free now. */
  get numFree(): number {
    return this.numFreeSlots;
  }

  /** Slots holding a swapped-out block. */
  get numUsed(): number {
    return this.capacity - this.numFreeSlots;
  }

  /** A free slot, or -1 when none is left. */
  allocate(): number {
    if (this.numFreeSlots === 0) return -1;
    this.numFreeSlots--;
    return this.freeList[this.numFreeSlots]!;
  }

  /** Returns a slot from `allocate` (once). */
  release(slot: number): void {
    this.freeList[this.numFreeSlots] = slot;
    this.numFreeSlots++;
  }
}
