/** YaRN RoPE parameters as GGUF files carry them (`<arch>.rope.scaling.*`). */
export interface YarnParams {
  /** Context extension factor (`rope.scaling.factor`); the interpolated pairs turn 1/factor as fast. */
  readonly factor: number;
  /** Context the model was trained at before the extension (`rope.scaling.original_context_length`). */
  readonly originalContext: number;
  /** Rotations over the original context above which a pair is extrapolated (default 32). */
  readonly betaFast: number;
  /** Rotations below which a pair is fully interpolated (default 1). */
  readonly betaSlow: number;
}

/**
 * YaRN's frequencies (Peng et al. 2023) as per-pair divisors of the plain RoPE frequencies
 * `base^(-2i/d)`: pairs that turn more than `betaFast` times over the original context keep
 * their frequency, pairs that turn fewer than `betaSlow` times are divided by `factor`, and a
 * linear ramp blends the ones between, with ggml's correction dims (floor / ceil, clamped to
 * `[0, d - 1]`) so that the angles equal llama.cpp's. YaRN's other half, scaling cos/sin by an
 * attention factor, is not expressed here: callers accept only files where that factor is 1.
 */
export function yarnFreqDivisors(headDim: number, base: number, p: YarnParams): number[] {
  const corrDim = (rotations: number) =>
    (headDim * Math.log(p.originalContext / (rotations * 2 * Math.PI))) / (2 * Math.log(base));
  const low = Math.max(0, Math.floor(corrDim(p.betaFast)));
  const high = Math.min(headDim - 1, Math.ceil(corrDim(p.betaSlow)));
  const freqScale = 1 / p.factor;
  return Array.from({ length: headDim / 2 }, (_, i) => {
    const y = (i - low) / Math.max(0.001, high - low);
    const mix = 1 - Math.min(1, Math.max(0, y));
    return 1 / (freqScale * (1 - mix) + mix);
  });
}

/**
 * The factor llama.cpp multiplies YaRN's cos/sin by, from its `llama_context` set-up: 1 when a
 * `yarn_log_multiplier` of 1 cancels the `0.1·ln(factor) + 1` magnitude (Ministral 3, DeepSeek),
 * `0.1·ln(factor) + 1` without one; times `rope.scaling.attn_factor`.
 */
export function yarnAttentionFactor(
  factor: number,
  logMultiplier: number,
  attnFactor: number,
): number {
  const mscale = (m: number) => (factor <= 1 ? 1 : 0.1 * m * Math.log(factor) + 1);
  return (logMultiplier !== 0 ? mscale(1) / mscale(logMultiplier) : mscale(1)) * attnFactor;
}
