// Preemption: which running request gives its blocks back when the cache is full (the
// preemption policy's choice), and how (swap to host slots, or recompute later).
import type { KvCacheManager } from '@kvasir/kv-allocator';
import type { StepState } from './batch-planner.js';
import { SchedulerError } from './errors.js';
import type { PreemptionPolicy } from './policies.js';
import { EMPTY_PREFIX, RUNNING, type SequenceGroup, WAITING } from './request-state.js';
import type { SwapSpace } from './swap-space.js';
import type { PreemptionMode, SchedulerEvent } from './types.js';
import type { WaitingQueue } from './waiting-queue.js';

/** Chooses victims and preempts them, counting each mode. */
export class Preemptor {
  preemptionsRecompute = 0;
  preemptionsSwap = 0;
  /** Swap preemptions that found too few free host slots and recomputed instead. */
  swapFallbacks = 0;

  constructor(
    private readonly kvCache: KvCacheManager,
    private readonly mode: PreemptionMode,
    private readonly policy: PreemptionPolicy,
    private readonly swap: SwapSpace,
    private readonly waiting: WaitingQueue,
    private readonly emit: (e: SchedulerEvent) => void,
  ) {}

  /**
   * The policy's victim among running requests not yet scheduled in this step (their blocks
   * are not in the plan yet).
   * @throws {SchedulerError} INVALID_POLICY when the policy names none of the candidates.
   */
  chooseVictim(running: readonly SequenceGroup[], step: number): SequenceGroup {
    const candidates: SequenceGroup[] = [];
    for (const r of running) {
      if (r.state === RUNNING && r.scheduledStep !== step) candidates.push(r);
    }
    const id = this.policy.chooseVictim(candidates);
    const victim = candidates.find((c) => c.requestId === id);
    if (!victim) {
      throw new SchedulerError(
        'INVALID_POLICY',
        `preemption policy ${this.policy.name} chose ${JSON.stringify(id)}, which is not one of the ${candidates.length} candidates`,
      );
    }
    return victim;
  }

  /**
   * Takes the group's blocks back: swapped out (it resumes without recompute) when swap mode
   * finds host slots for them all, else freed and requeued to recompute its tokens.
   */
  preempt(g: SequenceGroup, st: StepState): void {
    st.preempted = true;
    g.numPreemptions++;
    let mode = this.mode;
    let fellBack = false;
    // A compressed cache is no prefix of the tokens, which swap-in re-allocates and re-hashes.
    if (mode === 'swap' && (g.hasDroppedBlocks || !this.swap.canSwapOut(g))) {
      mode = 'recompute';
      fellBack = true;
      this.swapFallbacks++;
    }
    if (mode === 'swap') {
      this.swap.swapOut(g, st);
      this.preemptionsSwap++;
    } else {
      for (const s of g.seqs) {
        if (s.allocated) this.kvCache.free(s.id);
        s.allocated = false;
        s.resetComputed();
        s.prefix = EMPTY_PREFIX;
      }
      g.state = WAITING;
      this.waiting.push(g);
      this.preemptionsRecompute++;
    }
    this.emit({
      type: 'preempt',
      requestId: g.req.id,
      mode,
      fellBackToRecompute: fellBack,
      step: st.step,
    });
  }
}
