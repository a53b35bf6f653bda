import { ModelError } from '../errors.js';
import { bitmaskWords, type TokenBitmask } from '../grammar/output-constraint.js';
import { Rng } from '../rng.js';

/**
 * How one request picks its next token. Every field is optional; the defaults sample from the
 * plain softmax. Order of application (as in Hugging Face and vLLM): penalties, temperature,
 * top-k, top-p, min-p, then a draw from the request's own seeded generator.
 */
export interface SamplingParams {
  /** Softmax temperature; `0` means greedy (argmax). Default 1. */
  readonly temperature?: number;
  /** Keep only the k most likely tokens; `0` or `-1` disables. Default disabled. */
  readonly topK?: number;
  /** Keep the smallest set of most likely tokens whose probability mass reaches `topP` (0, 1]. Default 1. */
  readonly topP?: number;
  /** Drop tokens whose probability is below `minP` × the most likely token's, in [0, 1]. Default 0. */
  readonly minP?: number;
  /**
   * CTRL-style repetition penalty over prompt and output tokens: positive logits are divided by
   * it, negative ones multiplied. `1` disables. Must be positive.
   */
  readonly repetitionPenalty?: number;
  /** OpenAI presence penalty: subtracted once from each token already generated. Default 0. */
  readonly presencePenalty?: number;
  /** OpenAI frequency penalty: subtracted once per earlier occurrence in the output. Default 0. */
  readonly frequencyPenalty?: number;
  /**
   * Seed of the request's generator. Requests with the same seed, params and logits draw the
   * same tokens whatever else is batched with them. Default: a seed from `Math.random`.
   */
  readonly seed?: number;
  /**
   * Report the sampled token's log-probability ({@link SampleResult.logprob}). Off by default:
   * it costs a pass over the vocabulary. Implied by `topLogprobs > 0`.
   */
  readonly logprobs?: boolean;
  /** How many most likely alternatives to report with their log-probabilities (0–20 typical). Default 0. */
  readonly topLogprobs?: number;
  /** Token ids that end the sequence; {@link SampleResult.stop} reports a hit. The caller acts on it. */
  readonly stopTokenIds?: readonly number[];
  /**
   * Added to the logits of these token ids before temperature and truncation (OpenAI's
   * `logit_bias`: -100 bans a token, 100 all but forces it). Ids outside the row are ignored.
   */
  readonly logitBias?: ReadonlyMap<number, number>;
}

/** A token id with its log-probability. */
export interface TokenLogprob {
  /** Token id. */
  readonly token: number;
  /** Natural log of its probability under the model's unprocessed distribution. */
  readonly logprob: number;
}

/** What {@link Sampler.sample} drew. */
export interface SampleResult {
  /** The chosen token id. */
  readonly token: number;
  /**
   * Its log-probability under the model's unprocessed distribution (log-softmax of the raw
   * logits, before penalties, temperature or truncation), as OpenAI-style APIs report it;
   * `null` unless `logprobs` or `topLogprobs` was asked for.
   */
  readonly logprob: number | null;
  /** The `topLogprobs` most likely tokens, most likely first (empty unless requested). */
  readonly topLogprobs: readonly TokenLogprob[];
  /** The token is one of `stopTokenIds`. */
  readonly stop: boolean;
}

/**
 * Per-sequence sampling state: the generator seeded from the request and the token history
 * the penalties look at. Create one per sequence; {@link Sampler.sample} records each drawn token.
 */
export class SamplingState {
  /** The sequence's random generator. */
  readonly rng: Rng;
  /** Count of each token generated so far (presence and frequency penalties). */
  readonly outputCounts = new Map<number, number>();
  /** Tokens of the prompt (repetition penalty). */
  readonly promptTokens: ReadonlySet<number>;
  /** Number of tokens sampled so far. */
  generated = 0;

  /**
   * @param seed - the request's seed (see {@link SamplingParams.seed}).
   * @param promptTokens - the prompt, for the repetition penalty.
   * @throws {@link ModelError} `INVALID_ARGUMENT` for a seed that is not a safe integer.
   */
  constructor(seed: number | undefined, promptTokens: Iterable<number> = []) {
    this.rng = new Rng(seed ?? Math.floor(Math.random() * 2 ** 32));
    this.promptTokens = new Set(promptTokens);
  }

  /** Records a token generated outside the sampler (e.g. a forced or resumed token). */
  record(token: number): void {
    this.outputCounts.set(token, (this.outputCounts.get(token) ?? 0) + 1);
    this.generated++;
  }

  /**
   * A child state for parallel sampling: the same history, a fresh generator.
   * @throws {@link ModelError} `INVALID_ARGUMENT` for a bad seed.
   */
  fork(seed: number): SamplingState {
    const s = new SamplingState(seed, this.promptTokens);
    for (const [t, c] of this.outputCounts) s.outputCounts.set(t, c);
    s.generated = this.generated;
    return s;
  }
}

function invalid(message: string): ModelError {
  return new ModelError('INVALID_ARGUMENT', `sampling: ${message}`);
}

/**
 * Checks sampling parameters.
 *
 * @throws {@link ModelError} `INVALID_ARGUMENT` naming the bad field.
 */
export function validateSamplingParams(p: SamplingParams): void {
  const t = p.temperature ?? 1;
  if (!Number.isFinite(t) || t < 0)
    throw invalid(`temperature must be a finite number >= 0, got ${t}`);
  const k = p.topK ?? 0;
  if (!Number.isInteger(k) || k < -1) throw invalid(`topK must be an integer >= -1, got ${k}`);
  const tp = p.topP ?? 1;
  if (!(tp > 0 && tp <= 1)) throw invalid(`topP must be in (0, 1], got ${tp}`);
  const mp = p.minP ?? 0;
  if (!(mp >= 0 && mp <= 1)) throw invalid(`minP must be in [0, 1], got ${mp}`);
  const r = p.repetitionPenalty ?? 1;
  if (!(r > 0) || !Number.isFinite(r))
    throw invalid(`repetitionPenalty must be a positive number, got ${r}`);
  for (const key of ['presencePenalty', 'frequencyPenalty'] as const) {
    const v = p[key] ?? 0;
    if (!Number.isFinite(v)) throw invalid(`${key} must be finite, got ${v}`);
  }
  const n = p.topLogprobs ?? 0;
  if (!Number.isInteger(n) || n < 0) throw invalid(`topLogprobs must be an integer >= 0, got ${n}`);
  if (p.seed !== undefined && !Number.isSafeInteger(p.seed))
    throw invalid(`seed must be a safe integer, got ${p.seed}`);
  if (p.logitBias) {
    for (const [t, b] of p.logitBias) {
      if (!Number.isInteger(t) || t < 0)
        throw invalid(`logitBias token ids must be integers >= 0, got ${t}`);
      if (!Number.isFinite(b)) throw invalid(`logitBias for token ${t} must be finite, got ${b}`);
    }
  }
}

/** Buckets of the (temperature-scaled) logit gap to the maximum, a quarter octave of probability each. */
const BUCKETS = 256;
const BUCKET_SCALE = 4 / Math.LN2;
/** Gap in nats beyond which a token's probability is taken as exactly 0 (e^-44 ≈ 8e-20 of the best). */
const CUTOFF = (BUCKETS - 1) / BUCKET_SCALE;

/**
 * Draws tokens from logit rows. One instance holds scratch buffers sized to the vocabulary and
 * is reused for every row of every step (no per-token allocations beyond the result object).
 * Not safe for concurrent use from several threads; it is synchronous, so one per engine is fine.
 *
 * @example
 * ```ts
 * const sampler = new Sampler();
 * const state = new SamplingState(42, promptIds);
 * const { token, stop } = sampler.sample(logitsRow, { temperature: 0.7, topP: 0.9, seed: 42 }, state);
 * ```
 */
export class Sampler {
  private work = new Float32Array(0);
  private prob = new Float64Array(0);
  private idx = new Uint32Array(0);
  private edge = new Uint32Array(0);
  private readonly bucketSum = new Float64Array(BUCKETS);
  private readonly bucketCount = new Uint32Array(BUCKETS);

  private ensure(v: number): void {
    if (this.work.length < v) {
      this.work = new Float32Array(v);
      this.prob = new Float64Array(v);
      this.idx = new Uint32Array(v);
      this.edge = new Uint32Array(v);
    }
  }

  /**
   * Samples one token from a row of logits and records it in `state`.
   *
   * @param logits - one row of the LM head's output (any length ≥ 1; a subarray is fine).
   * @param mask - the tokens allowed next (grammar-constrained decoding); every other token gets
   *   probability 0. Omitted for unconstrained rows, which then pay nothing for the feature.
   * @throws {@link ModelError} `INVALID_ARGUMENT` for bad params, an empty row, a mask that is
   *   too short or allows no token of the row, or a row with NaN or +Infinity or without any
   *   finite value (`details.token` names the first bad one): broken weights or a backend
   *   fault, never a token to draw.
   */
  sample(
    logits: Float32Array,
    params: SamplingParams,
    state: SamplingState,
    mask?: TokenBitmask,
  ): SampleResult {
    validateSamplingParams(params);
    const v = logits.length;
    if (v === 0) throw invalid('empty logits row');
    checkLogits(logits);
    this.ensure(v);
    const work = this.work;
    work.set(logits);
    applyPenalties(work.subarray(0, v), params, state);
    if (params.logitBias) applyLogitBias(work.subarray(0, v), params.logitBias);
    if (mask) applyTokenBitmask(work.subarray(0, v), mask);

    const temperature = params.temperature ?? 1;
    let token: number;
    if (temperature === 0 || params.topK === 1) token = argmax(work, v);
    else token = this.draw(work, v, temperature, params, state.rng);
    // Finite logits that the mask leaves none of: no token is allowed, so none is drawn.
    if (work[token] === Number.NEGATIVE_INFINITY) {
      throw new ModelError('INVALID_ARGUMENT', 'sampling: no allowed token has a finite logit', {
        details: { token, value: Number.NEGATIVE_INFINITY },
      });
    }

    state.record(token);
    const n = params.topLogprobs ?? 0;
    const stop = params.stopTokenIds?.includes(token) ?? false;
    if (!params.logprobs && n === 0)
      return { token, logprob: null, topLogprobs: NO_LOGPROBS, stop };
    const { logprob, top } = logprobs(logits, token, n);
    return { token, logprob, topLogprobs: top, stop };
  }

  private draw(
    work: Float32Array,
    v: number,
    temperature: number,
    p: SamplingParams,
    rng: Rng,
  ): number {
    const k = p.topK !== undefined && p.topK > 0 && p.topK < v ? p.topK : 0;
    const topP = p.topP ?? 1;
    const minP = p.minP ?? 0;
    let m = Number.NEGATIVE_INFINITY;
    for (let i = 0; i < v; i++) if (work[i]! > m) m = work[i]!;
    if (m === Number.NEGATIVE_INFINITY) return argmax(work, v);
    const invT = 1 / temperature;
    const idx = this.idx;
    const prob = this.prob;
    // Unnormalized probabilities relative to the best token (which gets exactly 1). Tokens more
    // than CUTOFF nats below it get exactly 0: even a million of them weigh under 1e-13 of the
    // total, and skipping their exp() is most of the work on peaked distributions. Each token's
    // bucket (its gap to the best, in quarter octaves) is parked in idx.
    let total = 0;
    for (let i = 0; i < v; i++) {
      const gap = (m - work[i]!) * invT;
      if (gap < CUTOFF) {
        const e = Math.exp(-gap);
        prob[i] = e;
        total += e;
        idx[i] = Math.floor(gap * BUCKET_SCALE);
      } else {
        prob[i] = 0;
        idx[i] = BUCKETS - 1;
      }
    }
    if (k === 0 && topP >= 1) {
      // Only min-p (or nothing): a threshold on the relative probability, no ordering needed.
      const floor = minP > 0 ? minP : Number.MIN_VALUE;
      let mass = 0;
      for (let i = 0; i < v; i++) if (prob[i]! >= floor) mass += prob[i]!;
      let u = rng.nextFloat() * mass;
      let last = 0;
      for (let i = 0; i < v; i++) {
        const w = prob[i]!;
        if (w < floor) continue;
        last = i;
        u -= w;
        if (u < 0) return i;
      }
      return last;
    }
    // Walk the buckets from the most likely until they hold k tokens or the top-p mass. Every
    // token of an earlier bucket is kept; only the boundary bucket needs ordering.
    const bs = this.bucketSum;
    const bc = this.bucketCount;
    bs.fill(0);
    bc.fill(0);
    for (let i = 0; i < v; i++) {
      const b = idx[i]!;
      bs[b] = bs[b]! + prob[i]!;
      bc[b] = bc[b]! + 1;
    }
    let last = 0;
    let countBefore = 0;
    let massBefore = 0;
    for (let b = 0; b < BUCKETS; b++) {
      last = b;
      if (k > 0 ? countBefore + bc[b]! >= k : massBefore + bs[b]! >= topP * total) break;
      countBefore += bc[b]!;
      massBefore += bs[b]!;
    }
    const edge = this.edge;
    let n = 0;
    let ne = 0;
    // Writes land at n <= i, after idx[i] was read, so the buckets are consumed safely in place.
    for (let i = 0; i < v; i++) {
      const b = idx[i]!;
      if (b < last) idx[n++] = i;
      else if (b === last) edge[ne++] = i;
    }
    const byLogit = (a: number, b: number) => work[b]! - work[a]! || a - b;
    const boundary = edge.subarray(0, ne);
    boundary.sort(byLogit);
    let keepEdge: number;
    if (k > 0) {
      keepEdge = Math.min(ne, k - n);
      for (let j = 0; j < keepEdge; j++) idx[n + j] = boundary[j]!;
      n += keepEdge;
      if (topP < 1) {
        // Top-p over the top-k set needs that whole (small) set in order.
        const cand = idx.subarray(0, n);
        cand.sort(byLogit);
        let kmass = 0;
        for (let j = 0; j < n; j++) kmass += prob[cand[j]!]!;
        const target = topP * kmass;
        let c = 0;
        for (let j = 0; j < n; j++) {
          c += prob[cand[j]!]!;
          if (c >= target) {
            n = j + 1;
            break;
          }
        }
      }
    } else {
      const target = topP * total;
      let c = massBefore;
      keepEdge = ne;
      for (let j = 0; j < ne; j++) {
        c += prob[boundary[j]!]!;
        if (c >= target) {
          keepEdge = j + 1;
          break;
        }
      }
      for (let j = 0; j < keepEdge; j++) idx[n + j] = boundary[j]!;
      n += keepEdge;
    }
    let mass = 0;
    for (let j = 0; j < n; j++) {
      const w = prob[idx[j]!]!;
      if (w >= minP && w > 0) mass += w;
    }
    let u = rng.nextFloat() * mass;
    let fallback = idx[0]!;
    for (let j = 0; j < n; j++) {
      const t = idx[j]!;
      const w = prob[t]!;
      if (w < minP || w === 0) continue;
      fallback = t;
      u -= w;
      if (u < 0) return t;
    }
    return fallback;
  }
}

/**
 * Refuses a row the sampler cannot draw from: NaN compares false with everything, so it would
 * be skipped silently and the draw would land on an arbitrary token (token 0, "\u0000", for
 * a model whose weights were read a byte off).
 */
function checkLogits(logits: Float32Array): void {
  let finite = false;
  for (let i = 0; i < logits.length; i++) {
    const x = logits[i]!;
    if (x > Number.NEGATIVE_INFINITY && x < Number.POSITIVE_INFINITY) {
      finite = true;
    } else if (x !== Number.NEGATIVE_INFINITY) {
      throw new ModelError(
        'INVALID_ARGUMENT',
        `sampling: logit ${i} of the row is ${x}; the model's output is not finite (broken weights or a backend fault)`,
        { details: { token: i, value: x } },
      );
    }
  }
  if (!finite) {
    throw new ModelError('INVALID_ARGUMENT', 'sampling: every logit of the row is -Infinity', {
      details: { token: 0, value: Number.NEGATIVE_INFINITY },
    });
  }
}

/**
 * Applies the repetition, presence and frequency penalties of `params` to a logits row in
 * place, from the history in `state` (repetition: prompt and output tokens; presence and
 * frequency: output tokens). Tokens outside the row are ignored.
 */
export function applyPenalties(work: Float32Array, p: SamplingParams, s: SamplingState): void {
  const v = work.length;
  const rep = p.repetitionPenalty ?? 1;
  if (rep !== 1) {
    const penalize = (t: number) => {
      if (t < 0 || t >= v) return;
      const x = work[t]!;
      work[t] = x > 0 ? x / rep : x * rep;
    };
    for (const t of s.promptTokens) penalize(t);
    for (const t of s.outputCounts.keys()) if (!s.promptTokens.has(t)) penalize(t);
  }
  const pres = p.presencePenalty ?? 0;
  const freq = p.frequencyPenalty ?? 0;
  if (pres !== 0 || freq !== 0) {
    for (const [t, c] of s.outputCounts) {
      if (t >= 0 && t < v) work[t] = work[t]! - freq * c - pres;
    }
  }
}

/** Adds `bias` to a logits row in place (ids outside the row are ignored). */
export function applyLogitBias(work: Float32Array, bias: ReadonlyMap<number, number>): void {
  const v = work.length;
  for (const [t, b] of bias) if (t >= 0 && t < v) work[t] = work[t]! + b;
}

/**
 * Sets every token of a logits row that `mask` does not allow to -Infinity, in place.
 *
 * @throws {@link ModelError} `INVALID_ARGUMENT` when the mask has fewer words than the row needs
 *   or allows none of its tokens.
 */
export function applyTokenBitmask(work: Float32Array, mask: TokenBitmask): void {
  const v = work.length;
  const words = bitmaskWords(v);
  if (mask.length < words) {
    throw invalid(`token mask of ${mask.length} words for a row of ${v} tokens (${words} needed)`);
  }
  let allowed = false;
  for (let w = 0; w < words; w++) {
    const bits = mask[w]!;
    const base = w << 5;
    const end = Math.min(32, v - base);
    // All ones: nothing to do for these 32 tokens (common in loose grammars).
    if (bits === -1 && end === 32) {
      allowed = true;
      continue;
    }
    for (let b = 0; b < end; b++) {
      if ((bits >>> b) & 1) allowed = true;
      else work[base + b] = Number.NEGATIVE_INFINITY;
    }
  }
  if (!allowed) throw invalid('the token mask allows no token of the row');
}

function argmax(x: Float32Array, v: number): number {
  let best = 0;
  let bv = x[0]!;
  for (let i = 1; i < v; i++) {
    if (x[i]! > bv) {
      bv = x[i]!;
      best = i;
    }
  }
  return best;
}

/**
 * Log-softmax of a logits row at one token, and its `n` most likely tokens.
 *
 * @param logits - raw logits row.
 * @param token - the token whose log-probability is returned.
 * @param n - how many most likely tokens to list (most likely first, ties by lower id).
 */
export function logprobs(
  logits: Float32Array,
  token: number,
  n: number,
): { logprob: number; top: TokenLogprob[] } {
  const v = logits.length;
  let m = Number.NEGATIVE_INFINITY;
  for (let i = 0; i < v; i++) if (logits[i]! > m) m = logits[i]!;
  let s = 0;
  for (let i = 0; i < v; i++) s += Math.exp(logits[i]! - m);
  const logZ = m + Math.log(s);
  const top: TokenLogprob[] = [];
  if (n > 0) {
    const want = Math.min(n, v);
    const ids: number[] = [];
    for (let i = 0; i < v; i++) {
      const x = logits[i]!;
      if (ids.length === want && x <= logits[ids[want - 1]!]!) continue;
      let j = ids.length < want ? ids.length : want - 1;
      ids[j] = i;
      while (j > 0 && logits[ids[j - 1]!]! < x) {
        ids[j] = ids[j - 1]!;
        ids[j - 1] = i;
        j--;
      }
    }
    for (const id of ids) top.push({ token: id, logprob: logits[id]! - logZ });
  }
  return { logprob: logits[token]! - logZ, top };
}

const NO_LOGPROBS: readonly TokenLogprob[] = Object.freeze([]);

let shared: Sampler | undefined;

/**
 * Samples one token with a shared {@link Sampler} (see there). Convenience for single callers.
 *
 * @throws {@link ModelError} `INVALID_ARGUMENT` for bad params or a bad mask.
 */
export function sample(
  logits: Float32Array,
  params: SamplingParams,
  state: SamplingState,
  mask?: TokenBitmask,
): SampleResult {
  shared ??= new Sampler();
  return shared.sample(logits, params, state, mask);
}
