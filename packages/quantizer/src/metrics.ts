import { QuantizerError } from './errors.js';

/** How far a tensor is from a reference. */
export interface TensorComparison {
  /** Largest |a − b|. */
  readonly maxAbsError: number;
  /** Mean of (a − b)². */
  readonly mse: number;
  /** a·b / (|a| |b|); 1 when both are all zero, 0 when only one is. */
  readonly cosine: number;
  /** 10·log10(Σa² / Σ(a − b)²) in dB; +Infinity when equal. */
  readonly snrDb: number;
}

/**
 * Compares `b` against the reference `a`, accumulating in f64. NaN anywhere makes every figure
 * NaN, so a broken kernel cannot look accurate.
 *
 * @throws QuantizerError `LENGTH_MISMATCH` for different lengths, `EMPTY_INPUT` for empty ones.
 */
export function compareTensors(a: ArrayLike<number>, b: ArrayLike<number>): TensorComparison {
  if (a.length !== b.length) {
    throw new QuantizerError('LENGTH_MISMATCH', `lengths differ: ${a.length} vs ${b.length}`, {
      details: { a: a.length, b: b.length },
    });
  }
  if (a.length === 0) throw new QuantizerError('EMPTY_INPUT', 'cannot compare empty tensors');
  let maxAbs = 0;
  let se = 0;
  let aa = 0;
  let bb = 0;
  let ab = 0;
  for (let i = 0; i < a.length; i++) {
    const x = a[i]!;
    const y = b[i]!;
    const d = x - y;
    const ad = Math.abs(d);
    if (Number.isNaN(ad)) maxAbs = Number.NaN;
    else if (ad > maxAbs) maxAbs = ad;
    se += d * d;
    aa += x * x;
    bb += y * y;
    ab += x * y;
  }
  const cosine = aa === 0 && bb === 0 ? 1 : aa === 0 || bb === 0 ? 0 : ab / Math.sqrt(aa * bb);
  const snrDb = se === 0 ? Number.POSITIVE_INFINITY : 10 * Math.log10(aa / se);
  return { maxAbsError: maxAbs, mse: se / a.length, cosine, snrDb };
}
