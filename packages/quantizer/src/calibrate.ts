import { QuantizerError } from './errors.js';
import { scaleFromAmax } from './quantize.js';

/** Formats with a symmetric per-tensor scale. */
export type CalibratedFormat = 'fp8-e4m3' | 'fp8-e5m2' | 'int8';

/** Options of {@link calibrateScale}. */
export interface CalibrateOptions {
  /**
   * Multiplies the observed amax before computing the scale (default 1). A margin above 1
   * leaves headroom for values larger than any sample; saturation handles the rest.
   */
  readonly margin?: number;
}

/**
 * Largest finite magnitude over `samples` (NaN and infinities are ignored).
 * @throws QuantizerError `EMPTY_INPUT` when there are no samples.
 */
export function amax(samples: Float32Array | readonly Float32Array[]): number {
  const list = samples instanceof Float32Array ? [samples] : samples;
  let n = 0;
  let m = 0;
  for (const s of list) {
    n += s.length;
    for (let i = 0; i < s.length; i++) {
      const a = Math.abs(s[i]!);
      if (a > m && a !== Number.POSITIVE_INFINITY) m = a;
    }
  }
  if (n === 0)
    throw new QuantizerError('EMPTY_INPUT', 'calibration needs at least one sample value');
  return m;
}

/**
 * A static per-tensor scale for `format` from sample activations: `amax · margin` maps onto
 * the format's largest value (448 for E4M3, 57344 for E5M2, 127 for int8). Use it as
 * `{ kind: 'per-tensor', scale }`. Without calibration vLLM uses scale 1.0, which wastes most of
 * the fp8 range on typical K/V magnitudes.
 *
 * @throws QuantizerError `EMPTY_INPUT` without samples, `BAD_SCALE` for a margin that is not a
 * positive finite number.
 */
export function calibrateScale(
  format: CalibratedFormat,
  samples: Float32Array | readonly Float32Array[],
  options?: CalibrateOptions,
): number {
  const margin = options?.margin ?? 1;
  if (!(Number.isFinite(margin) && margin > 0)) {
    throw new QuantizerError('BAD_SCALE', `margin must be a positive finite number, got ${margin}`);
  }
  return scaleFromAmax(format, Math.fround(amax(samples) * margin));
}

/**
 * Per-tensor scales for the keys and the values of one layer (they differ: keys have outlier
 * channels). See {@link calibrateScale}.
 * @throws QuantizerError as {@link calibrateScale}.
 */
export function calibrateKv(
  format: CalibratedFormat,
  keys: Float32Array | readonly Float32Array[],
  values: Float32Array | readonly Float32Array[],
  options?: CalibrateOptions,
): { readonly keyScale: number; readonly valueScale: number } {
  return {
    keyScale: calibrateScale(format, keys, options),
    valueScale: calibrateScale(format, values, options),
  };
}
