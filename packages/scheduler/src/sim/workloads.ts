import { SchedulerError } from '../errors.js';
import { Rng } from './rng.js';

/** One request of a simulated workload. */
export interface SimRequest {
  /** Arrival time, seconds from the start. */
  readonly arrivalTime: number;
  readonly promptTokenIds: Int32Array;
  /** Tokens the request generates (its max tokens; EOS is ignored). */
  readonly outputLen: number;
}

/** Which synthetic workload to draw. */
export interface WorkloadSpec {
  /**
   * 'sharegpt': long-tailed chat lengths (lognormal; mean prompt ≈ 160, output ≈ 330 tokens,
   *   as the ShareGPT trace in the PagedAttention paper).
   * 'alpaca': short instructions (mean prompt ≈ 19, output ≈ 58).
   * 'shared-prefix': every prompt starts with the same system prompt (`sharedPrefixLen`
   *   tokens), then a short user turn; outputs as 'alpaca'.
   */
  readonly kind: 'sharegpt' | 'alpaca' | 'shared-prefix';
  /** Requests to draw. Give this, `durationS`, or both (then whichever ends first). */
  readonly numRequests?: number;
  /**
   * Draw arrivals until this time (seconds). Use it for capacity questions: past the sustainable
   * rate the queue then grows with the duration, as in steady-state serving, instead of a fixed
   * batch of requests simply draining.
   */
  readonly durationS?: number;
  readonly seed?: number;
  /** Mean request rate (Poisson arrivals), requests per second. Infinity: all at t = 0. */
  readonly rate: number;
  /** Longest prompt + output. Default 2048. */
  readonly maxModelLen?: number;
  /** For 'shared-prefix'. Default 512. */
  readonly sharedPrefixLen?: number;
  readonly vocabSize?: number;
}

function lognormal(rng: Rng, median: number, sigma: number): number {
  return median * Math.exp(sigma * rng.normal());
}

const clamp = (x: number, lo: number, hi: number) => Math.max(lo, Math.min(hi, Math.round(x)));

/**
 * Draws a seeded workload. Lengths and arrival gaps come from separate streams, so the same
 * seed at two rates gives the same requests, only compressed in time (common random numbers:
 * latency curves over rate are then smooth and comparable).
 * @throws {SchedulerError} INVALID_CONFIG for a bad count or rate.
 */
export function generateWorkload(spec: WorkloadSpec): SimRequest[] {
  if (spec.numRequests === undefined && spec.durationS === undefined) {
    throw new SchedulerError('INVALID_CONFIG', 'give numRequests or durationS');
  }
  if (
    spec.numRequests !== undefined &&
    (!Number.isInteger(spec.numRequests) || spec.numRequests < 1)
  ) {
    throw new SchedulerError('INVALID_CONFIG', 'numRequests must be an integer ≥ 1');
  }
  if (spec.durationS !== undefined && !(spec.durationS > 0 && Number.isFinite(spec.durationS))) {
    throw new SchedulerError('INVALID_CONFIG', 'durationS must be finite and > 0');
  }
  if (!(spec.rate > 0)) throw new SchedulerError('INVALID_CONFIG', 'rate must be > 0');
  if (spec.durationS !== undefined && !Number.isFinite(spec.rate)) {
    throw new SchedulerError('INVALID_CONFIG', 'durationS needs a finite rate');
  }
  const limit = spec.numRequests ?? Number.POSITIVE_INFINITY;
  const until = spec.durationS ?? Number.POSITIVE_INFINITY;
  const seed = spec.seed ?? 1;
  const lengths = new Rng(seed);
  const tokens = new Rng(seed ^ 0x5bd1e995);
  const gaps = new Rng(seed ^ 0x1b873593);
  const maxLen = spec.maxModelLen ?? 2048;
  const vocab = spec.vocabSize ?? 32000;
  const prefixLen = spec.sharedPrefixLen ?? 512;
  const shared = new Int32Array(prefixLen);
  for (let i = 0; i < prefixLen; i++) shared[i] = 1 + tokens.int(vocab - 1);
  const out: SimRequest[] = [];
  let t = 0;
  for (let i = 0; i < limit; i++) {
    const gap = gaps.exp();
    if (Number.isFinite(spec.rate)) t += gap / spec.rate;
    if (t > until) break;
    let promptLen: number;
    let outputLen: number;
    let prefix = 0;
    if (spec.kind === 'sharegpt') {
      promptLen = clamp(lognormal(lengths, 100, 1.0), 4, Math.min(1024, maxLen - 4));
      outputLen = clamp(lognormal(lengths, 200, 1.0), 4, maxLen - promptLen);
    } else if (spec.kind === 'alpaca') {
      promptLen = clamp(lognormal(lengths, 15, 0.7), 2, maxLen - 4);
      outputLen = clamp(lognormal(lengths, 45, 0.7), 2, maxLen - promptLen);
    } else if (spec.kind === 'shared-prefix') {
      prefix = Math.min(prefixLen, maxLen - 8);
      promptLen = prefix + clamp(lognormal(lengths, 15, 0.7), 2, Math.max(2, maxLen - prefix - 4));
      outputLen = clamp(lognormal(lengths, 45, 0.7), 2, maxLen - promptLen);
    } else {
      throw new SchedulerError('INVALID_CONFIG', `unknown workload kind ${String(spec.kind)}`);
    }
    const prompt = new Int32Array(promptLen);
    prompt.set(shared.subarray(0, prefix));
    for (let j = prefix; j < promptLen; j++) prompt[j] = 1 + tokens.int(vocab - 1);
    out.push({ arrivalTime: t, promptTokenIds: prompt, outputLen });
  }
  return out;
}
