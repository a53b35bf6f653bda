// Swap preemption's side of the host tier: the requests swapped out, the host slots their
// blocks went to, and bringing them back onto the GPU.
import type { KvCacheManager } from '@kvasir/kv-allocator';
import type { BatchPlanner, StepState } from './batch-planner.js';
import type { HostSlotPool } from './host-slots.js';
import { EMPTY_PREFIX, RUNNING, type SequenceGroup, SWAPPED, WAITING } from './request-state.js';
import type { SchedulerEvent } from './types.js';
import type { WaitingQueue } from './waiting-queue.js';

/**
 * Swapped-out requests, oldest first. A block shared by several sequences of a group goes to
 * one host slot. Slots read by a swap-in are released only at the next `schedule()` or
 * `update()`, once the plan that reads them has run.
 */
export class SwapSpace {
  private swapped: SequenceGroup[] = [];
  private readonly deferredSlots: number[] = [];

  constructor(
    private readonly kvCache: KvCacheManager,
    private readonly hostSlots: HostSlotPool,
    private readonly planner: BatchPlanner,
    private readonly waiting: WaitingQueue,
    private readonly enablePrefixCaching: boolean,
    private readonly emit: (e: SchedulerEvent) => void,
  ) {}

  /** Swapped requests, including any that ended since the last `prune()`. */
  get length(): number {
    return this.swapped.length;
  }

  /** Drops entries no longer swapped out (resumed, recomputed, aborted). */
  prune(): void {
    this.swapped = this.swapped.filter((g) => g.state === SWAPPED);
  }

  /** Frees the slots of the swap-ins of the plan that ran before this call. */
  releaseDeferred(): void {
    for (const slot of this.deferredSlots) this.hostSlots.release(slot);
    this.deferredSlots.length = 0;
  }

  /** Whether every distinct block the group holds finds a free host slot. */
  canSwapOut(g: SequenceGroup): boolean {
    return g.heldBlocks(this.kvCache) <= this.hostSlots.numFree;
  }

  /**
   * Moves the group's blocks to host slots (added to the step's `swapOut`) and frees them on
   * the GPU; its full blocks stay in the prefix cache, so a swap-in may re-adopt them.
   * Check `canSwapOut` first.
   */
  swapOut(g: SequenceGroup, st: StepState): void {
    const slotOf = new Map<number, number>();
    for (const s of g.seqs) {
      if (!s.live || !s.allocated) continue;
      const table = this.kvCache.blockTable(s.id);
      const slots = new Int32Array(table.length);
      for (let i = 0; i < table.length; i++) {
        const b = table[i]!;
        let slot = slotOf.get(b);
        if (slot === undefined) {
          slot = this.hostSlots.allocate();
          slotOf.set(b, slot);
          g.hostSlotList.push(slot);
          st.swapOut.push({ gpuBlock: b, hostSlot: slot, requestId: g.req.id });
        }
        slots[i] = slot;
      }
      s.hostSlots = slots;
      this.kvCache.free(s.id);
      s.allocated = false;
    }
    g.state = SWAPPED;
    this.swapped.push(g);
  }

  /**
   * Brings swapped requests back in order while their blocks and rows fit, adding them to
   * `running` and planning their next tokens. One that cannot fit even with nothing else
   * running is sent to recompute instead.
   */
  swapIn(st: StepState, running: SequenceGroup[]): void {
    for (const g of this.swapped) {
      if (g.state !== SWAPPED) continue;
      let rows = 0;
      let needed = 0;
      for (const s of g.seqs) {
        if (!s.live || !s.hostSlots) continue;
        rows++;
        // Without prefix hits, as an upper bound: swapped tokens plus the next token.
        needed += Math.ceil((s.numComputed + 1) / this.kvCache.blockSize);
      }
      if (rows > st.seqBudget) return;
      if (needed > this.kvCache.numAvailableBlocks()) {
        // The bound ignores sharing (forked sequences come back as separate copies). When
        // nothing else runs, waiting longer cannot help: recompute instead.
        if (running.length === 0 || needed > this.kvCache.numBlocks) {
          this.toRecompute(g);
          continue;
        }
        return;
      }
      for (const s of g.seqs) {
        if (!s.live || !s.hostSlots) continue;
        const computed = s.tokens.subarray(0, s.numComputed);
        let prefix = EMPTY_PREFIX;
        if (this.enablePrefixCaching) {
          // Blocks still cached on the GPU need no transfer.
          prefix = this.kvCache.findCachedPrefix(computed, g.req.extraKeys);
        }
        const res = this.kvCache.allocateSlots(s.id, computed.subarray(prefix.numTokens), {
          prefix,
          extraKeys: g.req.extraKeys,
        });
        if (!res.ok) throw new Error('unreachable: swap-in was checked against free blocks');
        const table = this.kvCache.blockTable(s.id);
        for (let i = prefix.blocks.length; i < table.length; i++) {
          st.swapIn.push({ gpuBlock: table[i]!, hostSlot: s.hostSlots[i]!, requestId: g.req.id });
        }
        s.hostSlots = null;
        s.allocated = true;
      }
      // Released next step: a swap-out in this same plan must not overwrite them before
      // the swap-in reads them.
      for (const slot of g.hostSlotList) this.deferredSlots.push(slot);
      g.hostSlotList = [];
      g.state = RUNNING;
      running.push(g);
      this.emit({ type: 'swap-in', requestId: g.req.id, step: st.step });
      this.planner.runIfFits(g, st);
    }
  }

  /** Gives up a swapped group's host copy: it waits to be recomputed from its tokens. */
  private toRecompute(g: SequenceGroup): void {
    for (const slot of g.hostSlotList) this.hostSlots.release(slot);
    g.hostSlotList = [];
    for (const s of g.seqs) {
      s.hostSlots = null;
      s.resetComputed();
    }
    g.state = WAITING;
    this.waiting.push(g);
  }
}
