// What-if codecs the benchmark measures beside the shipped formats, on the same K/V and the same
// attention: the options weighed for the int8 and int4 goals. They are written here, not in the
// package, because none of them ships (the README's "Rotation" section says why).

import {
  dequantize,
  f16Decode,
  f16Encode,
  type HadamardSize,
  int4Decode,
  int4Encode,
  int4GroupParams,
  int8Decode,
  int8Encode,
  inverseScale,
  type KvShape,
  quantize,
} from '../src/index.js';

/** One alternative: bytes per token per KV head (K + V) and the round trip of K and of V. */
export interface Alternative {
  readonly name: string;
  readonly bytesPerTokenHead: number;
  readonly key: (k: Float32Array) => Float32Array;
  readonly value: (v: Float32Array) => Float32Array;
}

/** Runs of `group` elements along each row, quantized by `codec` (in place on a copy). */
function grouped(
  x: Float32Array,
  group: number,
  codec: (x: Float32Array, out: Float32Array, start: number, end: number) => void,
): Float32Array {
  const out = new Float32Array(x.length);
  for (let s = 0; s < x.length; s += group) codec(x, out, s, s + group);
  return out;
}

/** int8 with an f16 scale per group (the scale rounded up to an f16, so amax still fits). */
function int8F16Scale(x: Float32Array, out: Float32Array, start: number, end: number): void {
  let amax = 0;
  for (let i = start; i < end; i++) amax = Math.max(amax, Math.abs(x[i]!));
  const want = Math.fround(amax / 127);
  let code = f16Encode(want);
  if (f16Decode(code) < want) code++;
  const scale = f16Decode(code) || 1;
  const inv = inverseScale(scale);
  for (let i = start; i < end; i++) out[i] = int8Decode(int8Encode(x[i]!, inv), scale);
}

/** Asymmetric int4 with an f32 scale and integer zero point per group, as the package's int4. */
function int4Group(x: Float32Array, out: Float32Array, start: number, end: number): void {
  const { scale, inv, zero } = int4GroupParams(x, start, end);
  for (let i = start; i < end; i++) out[i] = int4Decode(int4Encode(x[i]!, inv, zero), scale, zero);
}

/**
 * QServe's SmoothAttention scales for keys, as powers of two (exact to apply and undo): per
 * (head, channel) `2^round(log2(max(1, amax_c / median amax)^alpha))`, with the amax of a RoPE
 * pair `(c, c + d/2)` for both channels of the pair, calibrated on `cal` keys.
 */
function smoothingScales(cal: Float32Array, shape: KvShape, alpha: number): Float32Array {
  const { heads, headDim: d } = shape;
  const tokens = cal.length / (heads * d);
  const lambda = new Float32Array(heads * d);
  const am = new Float64Array(d);
  for (let h = 0; h < heads; h++) {
    am.fill(0);
    for (let t = 0; t < tokens; t++) {
      for (let c = 0; c < d; c++) am[c] = Math.max(am[c]!, Math.abs(cal[(t * heads + h) * d + c]!));
    }
    for (let c = 0; c < d / 2; c++) {
      const m = Math.max(am[c]!, am[c + d / 2]!);
      am[c] = m;
      am[c + d / 2] = m;
    }
    const median = Float64Array.from(am).sort()[d / 2]!;
    for (let c = 0; c < d; c++) {
      lambda[h * d + c] = 2 ** Math.round(Math.log2(Math.max(1, am[c]! / median) ** alpha));
    }
  }
  return lambda;
}

/** Divides keys by λ, quantizes with `roundTrip`, multiplies back (all exact but the codec). */
function smoothed(
  lambda: Float32Array,
  roundTrip: (x: Float32Array) => Float32Array,
): (k: Float32Array) => Float32Array {
  return (k) => {
    const x = Float32Array.from(k, (v, i) => v / lambda[i % lambda.length]!);
    return Float32Array.from(roundTrip(x), (v, i) => v * lambda[i % lambda.length]!);
  };
}

/** The alternatives for K/V of `shape`, with smoothing scales calibrated on `calK`. */
export function alternatives(shape: KvShape, calK: Float32Array): Alternative[] {
  const d = shape.headDim;
  const rotated =
    (rotation: HadamardSize) =>
    (x: Float32Array): Float32Array =>
      dequantize(
        quantize(
          x,
          { format: 'int4', granularity: { kind: 'group', groupSize: 32 }, rotation },
          shape,
        ),
      );
  const g32 = (x: Float32Array): Float32Array => grouped(x, 32, int4Group);
  const lambda = smoothingScales(calK, shape, 0.5);
  const int4G32Bytes = d / 2 + (d / 32) * 8;
  return [
    {
      name: 'int8-g64-f16-scales',
      bytesPerTokenHead: 2 * (d + (d / 64) * 2),
      key: (x) => grouped(x, 64, int8F16Scale),
      value: (x) => grouped(x, 64, int8F16Scale),
    },
    {
      name: 'int4-g32-h8',
      bytesPerTokenHead: 2 * int4G32Bytes,
      key: rotated(8),
      value: rotated(8),
    },
    {
      name: 'int4-g32-h16',
      bytesPerTokenHead: 2 * int4G32Bytes,
      key: rotated(16),
      value: rotated(16),
    },
    {
      name: 'int4-k-g16-v-g32',
      bytesPerTokenHead: d / 2 + (d / 16) * 8 + int4G32Bytes,
      key: (x) => grouped(x, 16, int4Group),
      value: g32,
    },
    {
      name: 'int4-g32-smooth',
      bytesPerTokenHead: 2 * int4G32Bytes,
      key: smoothed(lambda, g32),
      value: g32,
    },
    {
      name: 'int4-g32-h32-smooth',
      bytesPerTokenHead: 2 * int4G32Bytes,
      key: smoothed(lambda, rotated(32)),
      value: rotated(32),
    },
  ];
}
