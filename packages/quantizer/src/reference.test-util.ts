// Slow, independent references for the tests: values from the field formula, rounding by
// searching the sorted table of representable values. Shares no code with the codecs.

import type { FloatFormat } from './minifloat.js';

interface Layout {
  readonly bits: number;
  readonly e: number;
  readonly m: number;
  readonly bias: number;
  /** OCP E4M3: only all-ones is NaN and there is no infinity. */
  readonly e4m3: boolean;
}

export const LAYOUTS: Record<FloatFormat, Layout> = {
  f16: { bits: 16, e: 5, m: 10, bias: 15, e4m3: false },
  bf16: { bits: 16, e: 8, m: 7, bias: 127, e4m3: false },
  'fp8-e4m3': { bits: 8, e: 4, m: 3, bias: 7, e4m3: true },
  'fp8-e5m2': { bits: 8, e: 5, m: 2, bias: 15, e4m3: false },
};

/** The value of `code` from the textbook formula (NaN for NaN codes). */
export function referenceDecode(format: FloatFormat, code: number): number {
  const l = LAYOUTS[format];
  const sign = code >> (l.bits - 1) ? -1 : 1;
  const e = (code >> l.m) & ((1 << l.e) - 1);
  const f = code & ((1 << l.m) - 1);
  const eMax = (1 << l.e) - 1;
  if (l.e4m3) {
    if (e === eMax && f === (1 << l.m) - 1) return Number.NaN;
  } else if (e === eMax) {
    return f === 0 ? sign * Number.POSITIVE_INFINITY : Number.NaN;
  }
  if (e === 0) return sign * f * 2 ** (1 - l.bias - l.m);
  return sign * (1 + f / 2 ** l.m) * 2 ** (e - l.bias);
}

interface Table {
  readonly values: number[];
  readonly codes: number[];
}
const tables = new Map<FloatFormat, Table>();

/** Non-negative finite values with their codes, ascending, plus the first value past max. */
function table(format: FloatFormat): Table {
  let t = tables.get(format);
  if (t) return t;
  const l = LAYOUTS[format];
  const values: number[] = [];
  const codes: number[] = [];
  for (let c = 0; c < 1 << (l.bits - 1); c++) {
    const v = referenceDecode(format, c);
    if (Number.isFinite(v)) {
      values.push(v);
      codes.push(c);
    }
  }
  // The overflow candidate: one ulp past max, with an odd (E4M3: 480 = 1.111b·2^8) or even
  // (binade start: 2^(emax+1)) mantissa, which decides ties at the midpoint.
  const max = values[values.length - 1]!;
  const ulp = max - values[values.length - 2]!;
  values.push(max + ulp);
  codes.push(-1);
  t = { values, codes };
  tables.set(format, t);
  return t;
}

/**
 * Round-to-nearest-even of the f32 value `x` into `format` by search: NaN → 'nan', overflow →
 * 'overflow', else the code (sign included).
 */
export function referenceEncode(format: FloatFormat, x: number): number | 'nan' | 'overflow' {
  if (Number.isNaN(x)) return 'nan';
  const l = LAYOUTS[format];
  const signBit = x < 0 || Object.is(x, -0) ? 1 << (l.bits - 1) : 0;
  const a = Math.abs(x);
  if (a === Number.POSITIVE_INFINITY) return 'overflow';
  const { values, codes } = table(format);
  if (a >= values[values.length - 1]!) return 'overflow';
  let lo = 0;
  let hi = values.length - 1;
  while (hi - lo > 1) {
    const mid = (lo + hi) >> 1;
    if (values[mid]! <= a) lo = mid;
    else hi = mid;
  }
  const dl = a - values[lo]!;
  const dh = values[hi]! - a;
  let pick: number;
  if (dl < dh) pick = lo;
  else if (dh < dl) pick = hi;
  else {
    // Tie: the even mantissa. The overflow candidate's parity is that of max's mantissa + 1.
    const cl = codes[lo]!;
    pick = (cl & 1) === 0 ? lo : hi;
  }
  const code = codes[pick]!;
  if (code < 0) return 'overflow';
  return signBit | code;
}
