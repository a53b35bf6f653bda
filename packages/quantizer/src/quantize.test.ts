import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { calibrateKv, calibrateScale } from './calibrate.js';
import { QuantizerError } from './errors.js';
import {
  bytesPerTokenHead,
  type Granularity,
  type KvShape,
  kiviSpecs,
  kvLayoutBytes,
  numScaleGroups,
  type QuantFormat,
  type QuantSpec,
  storageBytes,
} from './format.js';
import { compareTensors } from './metrics.js';
import { decodeFloat, encodeFloat, FLOAT_FORMATS } from './minifloat.js';
import { dequantize, quantize } from './quantize.js';
import { gaussian, keysWithOutliers } from './synthetic.test-util.js';

const shape: KvShape = { tokens: 6, heads: 2, headDim: 64 };
const n = shape.tokens * shape.heads * shape.headDim;

/** Index of the scale group that element i belongs to, derived from the granularity's words. */
function groupOf(g: Granularity, s: KvShape, i: number): number {
  const d = i % s.headDim;
  const row = Math.floor(i / s.headDim);
  switch (g.kind) {
    case 'none':
    case 'per-tensor':
      return 0;
    case 'per-token-head':
      return row;
    case 'group':
      return row * (s.headDim / g.groupSize) + Math.floor(d / g.groupSize);
    case 'per-channel': {
      const t = Math.floor(row / s.heads);
      const h = row % s.heads;
      return (Math.floor(t / g.groupSize) * s.heads + h) * s.headDim + d;
    }
  }
}

const scaled: Granularity[] = [
  { kind: 'per-token-head' },
  { kind: 'group', groupSize: 32 },
  { kind: 'group', groupSize: 64 },
  { kind: 'per-channel', groupSize: 4 },
];

describe('round trips for every format and granularity', () => {
  const x = keysWithOutliers(shape.tokens, shape.heads, shape.headDim, 7);
  it('f16 and bf16 round each element once', () => {
    for (const format of ['f16', 'bf16'] as const) {
      const y = dequantize(quantize(x, { format, granularity: { kind: 'none' } }, shape));
      for (let i = 0; i < n; i++)
        expect(y[i]).toBe(decodeFloat(format, encodeFloat(format, x[i]!)));
    }
  });
  for (const format of ['int8', 'fp8-e4m3', 'fp8-e5m2', 'int4'] as QuantFormat[]) {
    for (const granularity of scaled) {
      const label = `${format} ${granularity.kind}${'groupSize' in granularity ? ` ${granularity.groupSize}` : ''}`;
      it(`${label}: each element within the format's step of its group scale`, () => {
        const spec: QuantSpec = { format, granularity };
        const q = quantize(x, spec, shape);
        expect(q.scales.length).toBe(numScaleGroups(spec, shape));
        const y = dequantize(q);
        for (let i = 0; i < n; i++) {
          const gi = groupOf(granularity, shape, i);
          const s = q.scales[gi]!;
          let bound: number;
          if (format === 'int8') bound = s * 0.5;
          // Integer zero points may put the group's ends half a step further away.
          else if (format === 'int4') bound = s;
          else {
            const fs = FLOAT_FORMATS[format as 'fp8-e4m3'];
            // Half an ulp of the scaled value, at least half the smallest subnormal step.
            const v = Math.abs(x[i]! / s);
            const ulp = 2 ** (Math.max(Math.floor(Math.log2(v || 1)), 1 - fs.bias) - fs.mantBits);
            bound = 0.5 * ulp * s;
          }
          expect(Math.abs(y[i]! - x[i]!)).toBeLessThanOrEqual(bound * (1 + 1e-5) + 1e-30);
        }
      });
    }
  }
  it('fp8 and int8 with a calibrated per-tensor scale', () => {
    for (const format of ['int8', 'fp8-e4m3', 'fp8-e5m2'] as const) {
      const scale = calibrateScale(format, x);
      const y = dequantize(
        quantize(x, { format, granularity: { kind: 'per-tensor', scale } }, shape),
      );
      const c = compareTensors(x, y);
      expect(c.cosine).toBeGreaterThan(format === 'fp8-e5m2' ? 0.99 : 0.995);
    }
  });
});

describe('dynamic scales', () => {
  it('map each group amax onto the largest code (int8 ±127, fp8 ±max)', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 1000 }),
        fc.float({ min: Math.fround(1e-3), max: 100, noNaN: true }),
        (seed, std) => {
          const s: KvShape = { tokens: 2, heads: 2, headDim: 32 };
          const x = gaussian(128, seed, std);
          for (const format of ['int8', 'fp8-e4m3', 'fp8-e5m2'] as const) {
            const q = quantize(x, { format, granularity: { kind: 'per-token-head' } }, s);
            for (let r = 0; r < 4; r++) {
              let amaxIdx = r * 32;
              for (let i = r * 32; i < r * 32 + 32; i++)
                if (Math.abs(x[i]!) > Math.abs(x[amaxIdx]!)) amaxIdx = i;
              const code = q.data[amaxIdx]!;
              const mag = format === 'int8' ? Math.abs((code << 24) >> 24) : code & 0x7f;
              const want = format === 'int8' ? 127 : FLOAT_FORMATS[format].maxCode;
              if (mag !== want) return false;
            }
          }
          return true;
        },
      ),
      { numRuns: 50 },
    );
  });
  it('ignore infinities and NaN when computing the scale, and saturate them', () => {
    const s: KvShape = { tokens: 1, heads: 1, headDim: 32 };
    const x = new Float32Array(32).fill(0.5);
    x[0] = 1;
    x[1] = Number.POSITIVE_INFINITY;
    x[2] = Number.NaN;
    const q8 = quantize(x, { format: 'int8', granularity: { kind: 'per-token-head' } }, s);
    expect(q8.scales[0]).toBeCloseTo(1 / 127, 7);
    expect(Array.from(q8.data.subarray(0, 3))).toEqual([127, 127, 0]);
    const qe = quantize(x, { format: 'fp8-e4m3', granularity: { kind: 'per-token-head' } }, s);
    expect(Array.from(qe.data.subarray(0, 3))).toEqual([0x7e, 0x7e, 0x7f]);
    const y = dequantize(qe);
    expect(y[2]).toBeNaN();
    const q5 = quantize(x, { format: 'fp8-e5m2', granularity: { kind: 'per-token-head' } }, s);
    expect(dequantize(q5)[1]).toBe(Number.POSITIVE_INFINITY);
    const q5n = quantize(
      x,
      { format: 'fp8-e5m2', granularity: { kind: 'per-token-head' }, saturate: false },
      s,
    );
    expect(q5n.data[1]).toBe(0x7c);
  });
  it('give an all-zero group zero codes and an exact zero reconstruction', () => {
    const s: KvShape = { tokens: 1, heads: 1, headDim: 32 };
    for (const format of ['int8', 'fp8-e4m3', 'int4'] as const) {
      const granularity: Granularity = { kind: 'per-token-head' };
      const y = dequantize(quantize(new Float32Array(32), { format, granularity }, s));
      expect(Array.from(y)).toEqual(new Array(32).fill(0));
    }
  });
});

describe('int4 packing and zero points', () => {
  it('stores element 2i in the low nibble and 2i+1 in the high nibble', () => {
    const s: KvShape = { tokens: 1, heads: 1, headDim: 32 };
    const x = new Float32Array(32);
    for (let i = 0; i < 32; i++) x[i] = 2 * (i % 16) - 6;
    const q = quantize(x, { format: 'int4', granularity: { kind: 'group', groupSize: 32 } }, s);
    expect(q.zeros[0]).toBe(3);
    expect(q.data.length).toBe(16);
    for (let k = 0; k < 16; k++) expect(q.data[k]).toBe(((2 * k) % 16) | (((2 * k + 1) % 16) << 4));
    expect(Array.from(dequantize(q)).map((v) => Math.round(v * 1e4) / 1e4)).toEqual(Array.from(x));
  });
  it('represents an offset channel better per channel (KIVI keys) than per token', () => {
    const s: KvShape = { tokens: 64, heads: 2, headDim: 64 };
    const k = keysWithOutliers(s.tokens, s.heads, s.headDim, 3);
    const kivi = kiviSpecs(32, 32);
    const perChannel = compareTensors(k, dequantize(quantize(k, kivi.key, s)));
    const perToken = compareTensors(k, dequantize(quantize(k, kivi.value, s)));
    expect(perChannel.snrDb).toBeGreaterThan(perToken.snrDb + 3);
  });
  it('handles a partial last token group per channel', () => {
    const s: KvShape = { tokens: 5, heads: 1, headDim: 32 };
    const spec: QuantSpec = { format: 'int4', granularity: { kind: 'per-channel', groupSize: 4 } };
    const x = gaussian(160, 11);
    const q = quantize(x, spec, s);
    expect(q.scales.length).toBe(64);
    expect(compareTensors(x, dequantize(q)).cosine).toBeGreaterThan(0.97);
  });
});

describe('memory accounting', () => {
  it('counts scales: int8 per token-head is ≤ 0.53× f16', () => {
    const f16 = bytesPerTokenHead({ format: 'f16', granularity: { kind: 'none' } }, 128);
    const i8 = bytesPerTokenHead({ format: 'int8', granularity: { kind: 'per-token-head' } }, 128);
    const i4 = bytesPerTokenHead(
      { format: 'int4', granularity: { kind: 'group', groupSize: 32 } },
      128,
    );
    expect(f16).toBe(256);
    expect(i8).toBe(132);
    expect(i8 / f16).toBeLessThanOrEqual(0.53);
    expect(i4).toBe(64 + 4 * 8);
    expect(kvLayoutBytes({ format: 'int8', granularity: { kind: 'per-token-head' } }, 128)).toEqual(
      {
        bytesPerElement: 1,
        scaleBytesPerTokenHead: 4,
      },
    );
    expect(
      kvLayoutBytes({ format: 'int4', granularity: { kind: 'group', groupSize: 32 } }, 128),
    ).toEqual({
      bytesPerElement: 0.5,
      scaleBytesPerTokenHead: 32,
    });
    expect(
      kvLayoutBytes({ format: 'fp8-e4m3', granularity: { kind: 'per-tensor', scale: 0.1 } }, 128)
        .scaleBytesPerTokenHead,
    ).toBe(0);
  });
  it('storageBytes equals what quantize allocates', () => {
    for (const spec of [
      { format: 'int4', granularity: { kind: 'group', groupSize: 32 } },
      { format: 'fp8-e5m2', granularity: { kind: 'per-channel', groupSize: 4 } },
      { format: 'bf16', granularity: { kind: 'none' } },
    ] as QuantSpec[]) {
      const q = quantize(gaussian(n, 1), spec, shape);
      expect(q.data.length + q.scales.length * 4 + q.zeros.length * 4).toBe(
        storageBytes(spec, shape),
      );
    }
  });
});

describe('typed errors before any work', () => {
  const x = new Float32Array(n);
  const code = (f: () => unknown): string | undefined => {
    try {
      f();
    } catch (e) {
      if (QuantizerError.isInstance(e)) return e.code;
      throw e;
    }
    return undefined;
  };
  it('names the bad input', () => {
    expect(
      code(() =>
        quantize(x, { format: 'int4', granularity: { kind: 'per-tensor', scale: 1 } }, shape),
      ),
    ).toBe('UNSUPPORTED_GRANULARITY');
    expect(
      code(() => quantize(x, { format: 'f16', granularity: { kind: 'per-token-head' } }, shape)),
    ).toBe('UNSUPPORTED_GRANULARITY');
    expect(
      code(() =>
        quantize(x, { format: 'int8', granularity: { kind: 'group', groupSize: 48 as 32 } }, shape),
      ),
    ).toBe('BAD_GROUP_SIZE');
    expect(
      code(() =>
        quantize(
          new Float32Array(40),
          { format: 'int8', granularity: { kind: 'group', groupSize: 32 } },
          {
            tokens: 1,
            heads: 1,
            headDim: 40,
          },
        ),
      ),
    ).toBe('BAD_GROUP_SIZE');
    expect(
      code(() =>
        quantize(x, { format: 'int8', granularity: { kind: 'per-tensor', scale: 0 } }, shape),
      ),
    ).toBe('BAD_SCALE');
    expect(
      code(() =>
        quantize(x.subarray(1), { format: 'int8', granularity: { kind: 'per-token-head' } }, shape),
      ),
    ).toBe('LENGTH_MISMATCH');
    expect(
      code(() =>
        quantize(
          x,
          { format: 'fp8-e4m3fnuz' as QuantFormat, granularity: { kind: 'none' } },
          shape,
        ),
      ),
    ).toBe('UNKNOWN_FORMAT');
    expect(
      code(() =>
        quantize(
          x,
          { format: 'int8', granularity: { kind: 'per-token-head' } },
          { ...shape, heads: 0 },
        ),
      ),
    ).toBe('BAD_SHAPE');
    const q = quantize(x, { format: 'int8', granularity: { kind: 'per-token-head' } }, shape);
    expect(code(() => dequantize({ ...q, scales: q.scales.subarray(1) }))).toBe('LENGTH_MISMATCH');
    expect(code(() => calibrateScale('int8', []))).toBe('EMPTY_INPUT');
    expect(code(() => calibrateScale('int8', x, { margin: -1 }))).toBe('BAD_SCALE');
  });
});

describe('calibration', () => {
  it('maps the sample amax onto the format maximum, keys and values separately', () => {
    const k = keysWithOutliers(8, 2, 64, 5);
    const v = gaussian(8 * 2 * 64, 6);
    const { keyScale, valueScale } = calibrateKv(
      'fp8-e4m3',
      [k.subarray(0, 512), k.subarray(512)],
      v,
    );
    let ka = 0;
    for (const e of k) ka = Math.max(ka, Math.abs(e));
    expect(keyScale).toBeCloseTo(ka / 448, 6);
    expect(keyScale).toBeGreaterThan(valueScale * 3);
    const s8 = calibrateScale('int8', k, { margin: 2 });
    expect(s8).toBeCloseTo((2 * ka) / 127, 5);
  });
});
