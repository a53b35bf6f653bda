import { SchedulerError } from '../errors.js';
import { type SimulationOptions, type SimulationResult, simulate } from './simulate.js';
import { generateWorkload, type WorkloadSpec } from './workloads.js';

/** Options of `findMaxRate`. */
export interface MaxRateOptions extends Omit<SimulationOptions, 'workload'> {
  /** The workload to scale; its `rate` is what is searched. */
  readonly workload: Omit<WorkloadSpec, 'rate'>;
  /** Mean normalized latency (seconds per output token) a rate must stay under. */
  readonly latencyBound: number;
  /** Rate where the search starts, requests/s. Default 1. */
  readonly initialRate?: number;
  /** Below this the answer is 0. Default 0.01. */
  readonly minRate?: number;
  /** The search stops doubling here. Default 10,000. */
  readonly maxRate?: number;
  /** Bisection steps once the answer is bracketed (each halves the log-interval). Default 8. */
  readonly iterations?: number;
  /** Called after each simulated rate, for progress reports. */
  readonly onProbe?: (probe: RateProbe & { readonly underBound: boolean }) => void;
}

/** One probed rate. */
export interface RateProbe {
  readonly rate: number;
  readonly meanNormalizedLatencyS: number;
}

/** The highest sustainable rate found, and what was probed. */
export interface MaxRateResult {
  /** Highest probed rate whose mean normalized latency was under the bound (0 if none). */
  readonly maxRate: number;
  /** The simulation at `maxRate` (undefined when 0). */
  readonly atMaxRate: SimulationResult | undefined;
  readonly probes: readonly RateProbe[];
  /**
   * What ended the search: `latency` when the answer lies between a rate under the bound and
   * one over it (a real result); `max-rate` when even `maxRate` stayed under the bound, so
   * `maxRate` is only a lower limit of the answer (too few requests to load the system);
   * `min-rate` when even `minRate` was over the bound (`maxRate` is 0).
   */
  readonly limitedBy: 'latency' | 'max-rate' | 'min-rate';
}

/**
 * Answers "how many requests per second does this model on this GPU sustain at this
 * latency?": bracket by doubling (or halving) the rate, then bisect in log space. Every probe
 * replays the same requests (same seed), only compressed in time.
 * @throws {SchedulerError} INVALID_CONFIG for a non-positive bound or bad rates.
 */
export function findMaxRate(options: MaxRateOptions): MaxRateResult {
  const bound = options.latencyBound;
  if (!(bound > 0)) throw new SchedulerError('INVALID_CONFIG', 'latencyBound must be > 0');
  const minRate = options.minRate ?? 0.01;
  const maxRate = options.maxRate ?? 10_000;
  let rate = options.initialRate ?? 1;
  if (!(minRate > 0) || !(maxRate >= minRate) || !(rate > 0)) {
    throw new SchedulerError('INVALID_CONFIG', 'need 0 < minRate ≤ maxRate and initialRate > 0');
  }
  const iterations = options.iterations ?? 8;
  const probes: RateProbe[] = [];
  const results = new Map<number, SimulationResult>();
  const probe = (r: number): boolean => {
    const result = simulate({
      ...options,
      workload: generateWorkload({
        ...options.workload,
        rate: r,
        maxModelLen: options.workload.maxModelLen ?? options.maxModelLen ?? 2048,
      }),
    });
    results.set(r, result);
    const underBound = result.meanNormalizedLatencyS <= bound;
    probes.push({ rate: r, meanNormalizedLatencyS: result.meanNormalizedLatencyS });
    options.onProbe?.({
      rate: r,
      meanNormalizedLatencyS: result.meanNormalizedLatencyS,
      underBound,
    });
    return underBound;
  };
  let lo = 0;
  let hi = 0;
  if (probe(rate)) {
    lo = rate;
    while (rate < maxRate) {
      rate = Math.min(maxRate, rate * 2);
      if (!probe(rate)) {
        hi = rate;
        break;
      }
      lo = rate;
    }
    if (hi === 0) return { maxRate: lo, atMaxRate: results.get(lo), probes, limitedBy: 'max-rate' };
  } else {
    hi = rate;
    while (rate > minRate) {
      rate /= 2;
      if (probe(rate)) {
        lo = rate;
        break;
      }
      hi = rate;
    }
    if (lo === 0) return { maxRate: 0, atMaxRate: undefined, probes, limitedBy: 'min-rate' };
  }
  for (let i = 0; i < iterations; i++) {
    const mid = Math.sqrt(lo * hi);
    if (probe(mid)) lo = mid;
    else hi = mid;
  }
  return { maxRate: lo, atMaxRate: results.get(lo), probes, limitedBy: 'latency' };
}
