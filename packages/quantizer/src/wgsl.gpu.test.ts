// The WGSL codecs against the CPU codecs, bit for bit, on the real WebGPU adapter (Mesa
// llvmpipe through Dawn's OpenGL ES backend where there is no GPU).

import { createGpu, type Gpu } from '@kvasir/gpu';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hadamardF32, wgslHadamard } from './hadamard.js';
import {
  int4Decode,
  int4Encode,
  int4ScaleFromRange,
  int4ZeroPoint,
  int8Decode,
  int8Encode,
  inverseScale,
  MIN_SCALE,
} from './integer.js';
import {
  bitsToF32,
  decodeFloatBits,
  encodeFloatBits,
  FLOAT_FORMATS,
  type FloatFormat,
  f32ToBits,
} from './minifloat.js';
import { scaleFromAmax } from './quantize.js';
import { rng } from './synthetic.test-util.js';
import {
  wgslFloatCodec,
  wgslInt4,
  wgslInt8,
  wgslPrefix,
  wgslQmaxRecip,
  wgslScaleHelpers,
} from './wgsl.js';

let gpu: Gpu;
beforeAll(async () => {
  gpu = await createGpu();
});
afterAll(() => {
  gpu?.destroy();
});

/**
 * Runs `out[i] = EXPR` over three u32 inputs `a`, `b`, `c` (bound as `a[i]`, `b[i]`, `c[i]`)
 * with `lib` prepended, and returns `out`.
 */
async function evalWgsl(
  lib: string,
  expr: string,
  a: Uint32Array,
  b: Uint32Array = new Uint32Array(a.length),
  c: Uint32Array = new Uint32Array(a.length),
): Promise<Uint32Array> {
  const code = `${lib}
@group(0) @binding(0) var<storage, read> in_a: array<u32>;
@group(0) @binding(1) var<storage, read> in_b: array<u32>;
@group(0) @binding(2) var<storage, read> in_c: array<u32>;
@group(0) @binding(3) var<storage, read_write> out: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = gid.x + gid.y * nwg.x * 64u;
  if (i >= arrayLength(&out)) { return; }
  let a = in_a[i];
  let b = in_b[i];
  let c = in_c[i];
  out[i] = ${expr};
}`;
  const n = a.length;
  const pipeline = await gpu.pipeline({ code, label: 'codec-test' });
  const outBuf = gpu.storageBuffer(n * 4);
  const groups = Math.ceil(n / 64);
  const x = Math.min(groups, 32768);
  await gpu.runDispatch(
    pipeline,
    [gpu.storageBuffer(a), gpu.storageBuffer(b), gpu.storageBuffer(c), outBuf],
    [x, Math.ceil(groups / x)],
  );
  return new Uint32Array(await gpu.readBuffer(outBuf));
}

function mismatches(
  got: Uint32Array,
  want: (i: number) => number,
  label: (i: number) => string,
): string[] {
  const bad: string[] = [];
  for (let i = 0; i < got.length && bad.length < 8; i++) {
    const w = want(i) >>> 0;
    if (got[i] !== w)
      bad.push(`${label(i)}: gpu 0x${got[i]!.toString(16)}, cpu 0x${w.toString(16)}`);
  }
  return bad;
}

/** f32 bit patterns that exercise a float format: its values, midpoints, neighbours, specials. */
function encodeInputs(format: FloatFormat, randomCount: number, seed: number): Uint32Array {
  const s = FLOAT_FORMATS[format];
  const list: number[] = [
    0, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00001, 0x7f800001, 1, 0x807fffff,
  ];
  const step = s.bits === 16 ? 7 : 1;
  for (let c = 0; c <= s.maxCode; c += step) {
    const v = decodeFloatBits(s, c);
    const w = decodeFloatBits(s, c + 1);
    const mid = f32ToBits((bitsToF32(v) + bitsToF32(w)) / 2);
    for (const b of [v - 1, v, v + 1, mid - 1, mid, mid + 1]) {
      list.push(b >>> 0, (b | 0x80000000) >>> 0);
    }
  }
  const r = rng(seed);
  for (let i = 0; i < randomCount; i++) list.push(Math.floor(r() * 2 ** 32) >>> 0);
  // f32 subnormals, which a flushing GPU would zero if they went through float arithmetic.
  for (let i = 0; i < 256; i++)
    list.push(Math.floor(r() * 0x800000) >>> 0, (0x80000000 | Math.floor(r() * 0x800000)) >>> 0);
  return Uint32Array.from(list);
}

const FORMATS: FloatFormat[] = ['f16', 'bf16', 'fp8-e4m3', 'fp8-e5m2'];

describe('WGSL float codecs equal the CPU codecs bit for bit', () => {
  for (const format of FORMATS) {
    const s = FLOAT_FORMATS[format];
    const p = wgslPrefix(format);
    it(`${format}: decode of every code`, async () => {
      const codes = Uint32Array.from({ length: 2 ** s.bits }, (_, i) => i);
      const got = await evalWgsl(wgslFloatCodec(format), `${p}_decode_bits(a)`, codes);
      expect(
        mismatches(
          got,
          (i) => decodeFloatBits(s, i),
          (i) => `code ${i}`,
        ),
      ).toEqual([]);
    });
    for (const saturate of [true, false]) {
      it(`${format}: encode (${saturate ? 'saturating' : 'non-saturating'}) of values, midpoints, specials, subnormals`, async () => {
        const xs = encodeInputs(format, 20000, 17);
        const got = await evalWgsl(wgslFloatCodec(format, { saturate }), `${p}_encode_bits(a)`, xs);
        const bad = mismatches(
          got,
          (i) => encodeFloatBits(s, xs[i]!, saturate),
          (i) => `f32 0x${xs[i]!.toString(16)}`,
        );
        expect(bad).toEqual([]);
        // The f32-typed entry point gives the same codes (this adapter keeps subnormals).
        const viaF32 = await evalWgsl(
          wgslFloatCodec(format, { saturate }),
          `${p}_encode(bitcast<f32>(a))`,
          xs,
        );
        expect(
          mismatches(
            viaF32,
            (i) => got[i]!,
            (i) => `f32 0x${xs[i]!.toString(16)}`,
          ),
        ).toEqual([]);
      });
    }
  }
});

describe('WGSL integer codecs and scale helpers equal the CPU bit for bit', () => {
  const r = rng(99);
  const n = 4096;
  const scales = Float32Array.from({ length: n }, () => Math.fround(10 ** (r() * 8 - 5)));
  const xs = Float32Array.from({ length: n }, (_, i) => {
    const k = i % 64;
    if (k === 0) return Number.NaN;
    if (k === 1) return Number.POSITIVE_INFINITY;
    if (k === 2) return Number.NEGATIVE_INFINITY;
    // Exact halfway points of the quantization grid, to test round-half-even.
    if (k < 12) return Math.fround((Math.floor(r() * 60) - 30 + 0.5) * scales[i]!);
    return Math.fround((r() * 2 - 1) * 140 * scales[i]!);
  });
  const bitsOf = (a: Float32Array): Uint32Array => new Uint32Array(a.buffer.slice(0));
  const inv = Float32Array.from(scales, (s) => inverseScale(s));

  it('int8 encode (saturating, NaN → 0), decode and unpack4', async () => {
    const enc = await evalWgsl(
      wgslInt8(),
      'int8_encode(bitcast<f32>(a), bitcast<f32>(b))',
      bitsOf(xs),
      bitsOf(inv),
    );
    expect(
      mismatches(
        enc,
        (i) => int8Encode(xs[i]!, inv[i]!) & 0xff,
        (i) => `x ${xs[i]} inv ${inv[i]}`,
      ),
    ).toEqual([]);
    const bytes = Uint32Array.from({ length: n }, (_, i) => i & 0xff);
    const dec = await evalWgsl(
      wgslInt8(),
      'bitcast<u32>(int8_decode(a, bitcast<f32>(b)))',
      bytes,
      bitsOf(scales),
    );
    expect(
      mismatches(
        dec,
        (i) => f32ToBits(int8Decode(((i & 0xff) << 24) >> 24, scales[i]!)),
        (i) => `byte ${i & 0xff}`,
      ),
    ).toEqual([]);
    const words = Uint32Array.from({ length: n }, () => Math.floor(r() * 2 ** 32) >>> 0);
    const lanes = Uint32Array.from({ length: n }, (_, i) => i & 3);
    const un = await evalWgsl(
      wgslInt8(),
      'bitcast<u32>(int8_unpack4(a, bitcast<f32>(b))[c])',
      words,
      bitsOf(scales),
      lanes,
    );
    expect(
      mismatches(
        un,
        (i) => f32ToBits(int8Decode((words[i]! << (24 - 8 * (i & 3))) >> 24, scales[i]!)),
        (i) => `word 0x${words[i]!.toString(16)} lane ${i & 3}`,
      ),
    ).toEqual([]);
  });

  it('int4 zero point, encode, decode and unpack8', async () => {
    const los = Float32Array.from({ length: n }, (_, i) =>
      Math.fround((r() * 2 - 1) * 8 * scales[i]!),
    );
    const zp = await evalWgsl(
      wgslInt4(),
      'bitcast<u32>(int4_zero_point(bitcast<f32>(a), bitcast<f32>(b)))',
      bitsOf(los),
      bitsOf(inv),
    );
    expect(
      mismatches(
        zp,
        (i) => f32ToBits(int4ZeroPoint(los[i]!, inv[i]!)),
        (i) => `lo ${los[i]}`,
      ),
    ).toEqual([]);
    const zeros = Float32Array.from(los, (lo, i) => int4ZeroPoint(lo, inv[i]!));
    const xq = Float32Array.from(xs, (x, i) => Math.fround(x / 8 + los[i]!));
    const enc = await evalWgsl(
      wgslInt4(),
      'int4_encode(bitcast<f32>(a), bitcast<f32>(b), bitcast<f32>(c))',
      bitsOf(xq),
      bitsOf(inv),
      bitsOf(zeros),
    );
    expect(
      mismatches(
        enc,
        (i) => int4Encode(xq[i]!, inv[i]!, zeros[i]!),
        (i) => `x ${xq[i]}`,
      ),
    ).toEqual([]);
    const qs = Uint32Array.from({ length: n }, (_, i) => i & 15);
    const dec = await evalWgsl(
      wgslInt4(),
      'bitcast<u32>(int4_decode(a, bitcast<f32>(b), bitcast<f32>(c)))',
      qs,
      bitsOf(scales),
      bitsOf(zeros),
    );
    expect(
      mismatches(
        dec,
        (i) => f32ToBits(int4Decode(qs[i]!, scales[i]!, zeros[i]!)),
        (i) => `q ${qs[i]} scale ${scales[i]} zero ${zeros[i]}`,
      ),
    ).toEqual([]);
    const words = Uint32Array.from({ length: n }, () => Math.floor(r() * 2 ** 32) >>> 0);
    const lanes = Uint32Array.from({ length: n }, (_, i) => i & 7);
    const un = await evalWgsl(
      wgslInt4(),
      'bitcast<u32>(int4_unpack8(a, bitcast<f32>(b), 3.0, c / 4u)[c % 4u])',
      words,
      bitsOf(scales),
      lanes,
    );
    expect(
      mismatches(
        un,
        (i) => f32ToBits(int4Decode((words[i]! >>> (4 * (i & 7))) & 15, scales[i]!, 3)),
        (i) => `word 0x${words[i]!.toString(16)} nibble ${i & 7}`,
      ),
    ).toEqual([]);
  });

  it('scale helpers: reciprocal, scale from amax (fp8, int8), int4 scale from range', async () => {
    const amaxes = Float32Array.from({ length: n }, (_, i) =>
      i % 16 === 0 ? 0 : i % 16 === 1 ? MIN_SCALE * 3 : Math.fround(10 ** (r() * 12 - 6)),
    );
    const recip = await evalWgsl(
      wgslScaleHelpers(),
      'bitcast<u32>(kq_inverse_scale(bitcast<f32>(a)))',
      bitsOf(scales),
    );
    expect(
      mismatches(
        recip,
        (i) => f32ToBits(inverseScale(scales[i]!)),
        (i) => `scale ${scales[i]}`,
      ),
    ).toEqual([]);
    for (const format of ['int8', 'fp8-e4m3', 'fp8-e5m2'] as const) {
      const got = await evalWgsl(
        wgslScaleHelpers(),
        `bitcast<u32>(kq_scale_from_amax(bitcast<f32>(a), ${wgslQmaxRecip(format)}))`,
        bitsOf(amaxes),
      );
      expect(
        mismatches(
          got,
          (i) => f32ToBits(scaleFromAmax(format, amaxes[i]!)),
          (i) => `${format} amax ${amaxes[i]}`,
        ),
      ).toEqual([]);
    }
    const lo = Float32Array.from(amaxes, (a, i) =>
      Math.fround(i % 5 === 4 ? a * 0.999999 : -a * (i % 3)),
    );
    const range = await evalWgsl(
      wgslInt4(),
      'bitcast<u32>(int4_scale_from_range(bitcast<f32>(a), bitcast<f32>(b)))',
      bitsOf(lo),
      bitsOf(amaxes),
    );
    expect(
      mismatches(
        range,
        (i) => f32ToBits(int4ScaleFromRange(lo[i]!, amaxes[i]!)),
        (i) => `range ${lo[i]}..${amaxes[i]}`,
      ),
    ).toEqual([]);
  });
});

describe('WGSL Hadamard transform equals the CPU bit for bit', () => {
  it('kq_fwht8 on values whose sums round (magnitudes 2^-30 … 2^30), with NaN and infinities', async () => {
    const r = rng(99);
    const n = 8 * 1024;
    const x = new Float32Array(n);
    for (let i = 0; i < n; i++) {
      x[i] = Math.fround((r() - 0.5) * 2 ** Math.floor(r() * 61 - 30));
    }
    x[3] = Number.NaN;
    x[17] = Number.POSITIVE_INFINITY;
    x[26] = Number.NEGATIVE_INFINITY;
    x[40] = Number.POSITIVE_INFINITY;
    x[41] = Number.POSITIVE_INFINITY;
    const lib = `${wgslHadamard()}
fn h8_at(i: u32) -> u32 {
  let base = i & ~7u;
  let a = bitcast<vec4<f32>>(vec4<u32>(in_a[base], in_a[base + 1u], in_a[base + 2u], in_a[base + 3u]));
  let b = bitcast<vec4<f32>>(vec4<u32>(in_a[base + 4u], in_a[base + 5u], in_a[base + 6u], in_a[base + 7u]));
  let h = kq_fwht8(a, b);
  let j = i & 7u;
  if (j < 4u) { return bitcast<u32>(h[0][j]); }
  return bitcast<u32>(h[1][j - 4u]);
}`;
    const got = await evalWgsl(lib, 'h8_at(i)', new Uint32Array(x.buffer.slice(0)));
    const want = Float32Array.from(x);
    hadamardF32(want, 8);
    const wantBits = new Uint32Array(want.buffer);
    // Any NaN is fine where the CPU has a NaN (WGSL does not fix NaN payloads).
    const isNan = (b: number): boolean => (b & 0x7fffffff) > 0x7f800000;
    expect(
      mismatches(
        Uint32Array.from(got, (g, i) => (isNan(g) && isNan(wantBits[i]!) ? wantBits[i]! : g)),
        (i) => wantBits[i]!,
        (i) => `element ${i}`,
      ),
    ).toEqual([]);
  });
});
