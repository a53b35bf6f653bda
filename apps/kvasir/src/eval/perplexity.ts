import { KvasirAppError } from '../errors.js';

/**
 * One window of a sliding-window evaluation: tokens `[begin, end)` go through the model as one
 * sequence from position 0; tokens `[scoreFrom, end)` are scored, each from the logits of the
 * token before it.
 */
export interface EvalWindow {
  readonly begin: number;
  readonly end: number;
  readonly scoreFrom: number;
}

/**
 * The windows of Hugging Face's perplexity-with-stride evaluation: windows of `ctx` tokens
 * starting every `stride` tokens, each scoring only the tokens the previous window did not
 * (its last `end - previousEnd`); the first window scores all but its first token, which nothing
 * predicts. Every token but the first is scored exactly once when `stride < ctx`; with
 * `stride = ctx` the windows do not overlap and each one's first token goes unscored too (nothing
 * in its window precedes it), as in the guide. The last window ends at the text's end.
 * @throws KvasirAppError `INVALID_CONFIG` unless `2 ≤ ctx`, `1 ≤ stride ≤ ctx` and there are at
 *   least 2 tokens.
 */
export function slidingWindows(numTokens: number, ctx: number, stride: number): EvalWindow[] {
  if (!Number.isInteger(ctx) || ctx < 2) {
    throw new KvasirAppError('INVALID_CONFIG', `--ctx: must be an integer ≥ 2, got ${ctx}`);
  }
  if (!Number.isInteger(stride) || stride < 1 || stride > ctx) {
    throw new KvasirAppError(
      'INVALID_CONFIG',
      `--stride: must be an integer in [1, ctx = ${ctx}], got ${stride}`,
    );
  }
  if (!Number.isInteger(numTokens) || numTokens < 2) {
    throw new KvasirAppError(
      'INVALID_CONFIG',
      `the text has ${numTokens} tokens; perplexity needs at least 2`,
    );
  }
  const windows: EvalWindow[] = [];
  let previousEnd = 0;
  for (let begin = 0; begin < numTokens; begin += stride) {
    const end = Math.min(begin + ctx, numTokens);
    windows.push({ begin, end, scoreFrom: Math.max(previousEnd, begin + 1) });
    previousEnd = end;
    if (end === numTokens) break;
  }
  return windows;
}

/** Log-softmax of a logits row into `out` (float64), returning the index of the largest. */
export function logSoftmax(row: Float32Array, out: Float64Array): number {
  let max = Number.NEGATIVE_INFINITY;
  let argmax = 0;
  for (let i = 0; i < row.length; i++) {
    if (row[i]! > max) {
      max = row[i]!;
      argmax = i;
    }
  }
  let sum = 0;
  for (let i = 0; i < row.length; i++) sum += Math.exp(row[i]! - max);
  const logZ = max + Math.log(sum);
  for (let i = 0; i < row.length; i++) out[i] = row[i]! - logZ;
  return argmax;
}

/** Running totals of a perplexity evaluation against an optional reference distribution. */
export class PerplexityAccumulator {
  #tokens = 0;
  #nll = 0;
  #referenceNll = 0;
  #kl = 0;
  #agree = 0;
  #compared = 0;
  readonly #lp: Float64Array;
  readonly #ref: Float64Array;

  constructor(vocabSize: number) {
    this.#lp = new Float64Array(vocabSize);
    this.#ref = new Float64Array(vocabSize);
  }

  /**
   * Scores `target` from the logits row of the token before it; with a reference row, also the
   * KL divergence KL(reference ‖ evaluated) of the whole next-token distribution and whether
   * both put the same token first.
   */
  add(row: Float32Array, target: number, reference?: Float32Array): void {
    const top = logSoftmax(row, this.#lp);
    this.#nll -= this.#lp[target]!;
    this.#tokens++;
    if (!reference) return;
    const refTop = logSoftmax(reference, this.#ref);
    this.#referenceNll -= this.#ref[target]!;
    let kl = 0;
    for (let i = 0; i < this.#ref.length; i++) {
      const r = this.#ref[i]!;
      kl += Math.exp(r) * (r - this.#lp[i]!);
    }
    // Rounding can leave a tiny negative sum for identical distributions.
    this.#kl += Math.max(0, kl);
    if (top === refTop) this.#agree++;
    this.#compared++;
  }

  /** Tokens scored so far. */
  get tokens(): number {
    return this.#tokens;
  }

  /** Mean negative log-likelihood (nats per token) and its exponential, the perplexity. */
  result(): {
    tokens: number;
    meanNll: number;
    perplexity: number;
    reference?: { perplexity: number; meanKl: number; top1Agreement: number };
  } {
    const meanNll = this.#nll / this.#tokens;
    return {
      tokens: this.#tokens,
      meanNll,
      perplexity: Math.exp(meanNll),
      ...(this.#compared > 0
        ? {
            reference: {
              perplexity: Math.exp(this.#referenceNll / this.#compared),
              meanKl: this.#kl / this.#compared,
              top1Agreement: this.#agree / this.#compared,
            },
          }
        : {}),
    };
  }
}
