import { checkContract } from './queue-policy.js';

/** The version of the {@link PreemptionPolicy} contract this package implements. */
export const PREEMPTION_POLICY_SPECIFICATION_VERSION = 'v1';

/** What a preemption policy sees of a running request. */
export interface RunningRequest {
  readonly requestId: string;
  readonly priority: number;
  readonly arrivalTime: number;
  readonly arrivalIndex: number;
  /** Tokens held in the KV cache by its sequences. */
  readonly numComputedTokens: number;
  readonly numSeqs: number;
  readonly numPreemptions: number;
}

/**
 * Chooses which running request to preempt when blocks run out (contract `v1`). `candidates`
 * are running requests not yet scheduled in this step (never empty); return the `requestId` of
 * the victim, as an `EvictionPolicy` returns the key to reclaim. Make one with
 * {@link definePreemptionPolicy}.
 */
export interface PreemptionPolicy {
  /** The contract version the policy was written against; `'v1'`. */
  readonly specificationVersion: typeof PREEMPTION_POLICY_SPECIFICATION_VERSION;
  /** Name for logs. */
  readonly name: string;
  chooseVictim(candidates: readonly RunningRequest[]): string;
}

/**
 * Makes a {@link PreemptionPolicy} from its name and `chooseVictim`, stamped with the version.
 * @throws {SchedulerError} INVALID_POLICY when `chooseVictim` is not a function.
 */
export function definePreemptionPolicy(
  hooks: Omit<PreemptionPolicy, 'specificationVersion'>,
): PreemptionPolicy {
  return validatePreemptionPolicy({
    ...hooks,
    specificationVersion: PREEMPTION_POLICY_SPECIFICATION_VERSION,
  });
}

/**
 * Checks that `value` is a {@link PreemptionPolicy} of a version this package implements.
 * @throws {SchedulerError} INVALID_POLICY naming what is missing or the unsupported version.
 */
export function validatePreemptionPolicy(value: unknown): PreemptionPolicy {
  checkContract(
    value,
    'preemption policy',
    PREEMPTION_POLICY_SPECIFICATION_VERSION,
    'definePreemptionPolicy',
    ['chooseVictim'],
  );
  return value as PreemptionPolicy;
}

/**
 * The default preemption policy: the lowest priority (largest value) first, then the latest
 * arrival (vLLM's rule), so the oldest important work keeps its blocks.
 */
export function lowestPriorityLatestArrival(): PreemptionPolicy {
  return definePreemptionPolicy({
    name: 'lowest-priority-latest-arrival',
    chooseVictim(candidates) {
      let best = 0;
      for (let i = 1; i < candidates.length; i++) {
        const c = candidates[i]!;
        const b = candidates[best]!;
        if (
          c.priority > b.priority ||
          (c.priority === b.priority &&
            (c.arrivalTime > b.arrivalTime ||
              (c.arrivalTime === b.arrivalTime && c.arrivalIndex > b.arrivalIndex)))
        ) {
          best = i;
        }
      }
      return candidates[best]!.requestId;
    },
  });
}
