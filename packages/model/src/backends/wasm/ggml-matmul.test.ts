import { GGML_BLOCK_FORMATS, type GgmlBlockType } from '@kvasir/quantizer/ggml';
import { randomFloats, seededRandom } from '@kvasir/test-utils';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { embeddingRef, matmulRef } from '../../kernels/reference.js';
import { type GgmlWeight, unpackWeight, weightBytesView } from '../../kernels/weight-format.js';
import { maxRelDiff } from '../../testing/compare.js';
import { ggmlWeight, ggmlMatmul as wasmMatmul } from '../../testing/ggml-harness.js';
import { wasmRuntimes } from '../../testing/wasm-runtimes.js';
import { type KernelsBuild, wasmFeatures } from './wasm-module.js';
import { Op } from './wasm-program.js';
import { uploadWeight, weightArgs } from './wasm-weights.js';

// The kernels quantize x to 8 bits per block of 32 (q = round(x · 127 / max|x|), as llama.cpp's
// Q8_0), multiply codes in integers and sum in f32. Two statements, each tested:
// - against the f64 dot of the decoded blocks with that quantized x (`quantizeLikeKernels`,
//   the same rounding), they differ only by f32 summation: within QX_TOL of Σ |w| · |x_q|;
// - against the f64 dot of the decoded blocks with x itself (the accuracy a user gets), within
//   DOT_TOL of Σ_c |w_c| · max|x| over c's block (`dotBound`): x's rounding is at most half a
//   step, max|x| / 254, plus that summation.
const QX_TOL = 4e-6;
const DOT_TOL = 1 / 254 + QX_TOL;
// Through the epilogues (SiLU, residual), relative to the largest output.
const EPILOGUE_TOL = 2e-2;

const FORMATS = Object.keys(GGML_BLOCK_FORMATS) as GgmlBlockType[];
// The kernels' builds this runtime runs: both on Node 22+, only the plain one on Node 20 (whose
// flagged relaxed SIMD is a draft the backend turns down: relaxed-simd.test.ts). The relaxed
// build's results for every type are compared bit for bit with the plain build's in Chromium
// (wasm-browser.test.ts).
const BUILDS: KernelsBuild[] = wasmFeatures().relaxedSimd ? ['plain', 'relaxed'] : ['plain'];

const runtime = wasmRuntimes();

/** Round half to even, as f32x4.nearest. */
function nearestEven(v: number): number {
  const r = Math.round(v);
  return r - v === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

/** x rounded to 8 bits per block of 32 exactly as c/int8-dot.h's quantize_blocks does (in f32). */
function quantizeLikeKernels(x: Float32Array): Float64Array {
  const out = new Float64Array(x.length);
  for (let b = 0; b < x.length; b += 32) {
    let amax = 0;
    for (let i = b; i < b + 32; i++) amax = Math.max(amax, Math.abs(x[i]!));
    const d = Math.fround(amax / 127);
    const inv = amax > 0 ? Math.fround(127 / amax) : 0;
    for (let i = b; i < b + 32; i++) out[i] = d * nearestEven(Math.fround(x[i]! * inv));
  }
  return out;
}

/** f64 dots of the decoded blocks with `xs` (m rows of k), and Σ |w| · |x| per output. */
function denseDots(
  w: GgmlWeight,
  xs: Float64Array,
  m: number,
): { dot: Float64Array; abs: Float64Array } {
  const dense = unpackWeight(w);
  const k = w.cols;
  const dot = new Float64Array(m * w.rows);
  const abs = new Float64Array(m * w.rows);
  for (let i = 0; i < m; i++) {
    for (let j = 0; j < w.rows; j++) {
      let s = 0;
      let a = 0;
      for (let c = 0; c < k; c++) {
        const p = dense[j * k + c]! * xs[i * k + c]!;
        s += p;
        a += Math.abs(p);
      }
      dot[i * w.rows + j] = s;
      abs[i * w.rows + j] = a;
    }
  }
  return { dot, abs };
}

/** Per output (token i, row j): Σ_c |W[j, c]| · max |x[i]| over the 32-block of c. */
function dotBound(x: Float32Array, m: number, w: GgmlWeight): Float64Array {
  const dense = unpackWeight(w);
  const k = w.cols;
  const out = new Float64Array(m * w.rows);
  for (let i = 0; i < m; i++) {
    const bmax = new Float64Array(k);
    for (let b = 0; b < k; b += 32) {
      let mx = 0;
      for (let c = b; c < b + 32; c++) mx = Math.max(mx, Math.abs(x[i * k + c]!));
      bmax.fill(mx, b, b + 32);
    }
    for (let j = 0; j < w.rows; j++) {
      let s = 0;
      for (let c = 0; c < k; c++) s += Math.abs(dense[j * k + c]!) * bmax[c]!;
      out[i * w.rows + j] = s;
    }
  }
  return out;
}

describe('wasm matmul from GGML blocks', () => {
  // rows (a tail under the 4-row thread split; an odd last row for the two-row kernels),
  // tokens (decode; an odd count for the 2×2 tiles; past one 16-token local block)
  const shapes = [
    { n: 10, m: 1 },
    { n: 7, m: 1 },
    { n: 7, m: 3 },
    { n: 36, m: 3 },
    { n: 20, m: 21 },
  ];
  for (const build of BUILDS) {
    for (const format of FORMATS) {
      const bs = GGML_BLOCK_FORMATS[format].blockSize;
      // Legacy formats: 3 blocks (groups of 16 not a multiple of 4, the offsets' scalar tail).
      const k = bs === 256 ? 512 : 96;
      for (const { n, m } of shapes) {
        it(`${build}: ${format} ${n}x${k}, ${m} tokens: the f64 dot with 8-bit x within ${QX_TOL}, with x within ${DOT_TOL.toFixed(5)}`, async () => {
          const rt = await runtime(2, build);
          const w = ggmlWeight(format, n, k, n * 31 + m);
          const x = randomFloats(seededRandom(m * 7 + n), m * k, 1);
          const got = wasmMatmul(rt, x, m, w, { shared: m > 1 });
          const q = denseDots(w, quantizeLikeKernels(x), m);
          const want = matmulRef(x, m, w);
          const bound = dotBound(x, m, w);
          let worstQ = 0;
          let worst = 0;
          for (let i = 0; i < got.length; i++) {
            worstQ = Math.max(worstQ, Math.abs(got[i]! - q.dot[i]!) / q.abs[i]!);
            worst = Math.max(worst, Math.abs(got[i]! - want[i]!) / bound[i]!);
          }
          expect(worstQ).toBeLessThan(QX_TOL);
          expect(worst).toBeLessThan(DOT_TOL);
          // Not vacuous: the results are the weights' dot products, not zeros.
          expect(maxRelDiff(new Float32Array(want.length), want)).toBeGreaterThan(0.05);
        });
      }
      for (const epilogue of ['residual', 'swiglu', 'swiglu-oai'] as const) {
        it(`${build}: ${format} with bias, ${epilogue}: matches matmulRef within ${EPILOGUE_TOL}`, async () => {
          const rt = await runtime(3, build);
          const n = 12;
          const m = 5;
          const rnd = seededRandom(5);
          const w = ggmlWeight(format, n, k, 99);
          const x = randomFloats(rnd, m * k, 1);
          const bias = randomFloats(rnd, n, 0.1);
          const outCols = epilogue.startsWith('swiglu') ? n / 2 : n;
          const residual = randomFloats(rnd, m * outCols, 1);
          const want = matmulRef(x, m, w, { bias, epilogue, out: residual.slice() });
          const got = wasmMatmul(rt, x, m, w, { bias, epilogue, out: residual });
          expect(maxRelDiff(got, want)).toBeLessThan(EPILOGUE_TOL);
        });
      }
    }
  }

  it('any type, shape, batch of 1 to 64 rows and thread count: every build, shared or local quantization, the same bits, within the bounds', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom(...FORMATS),
        fc.integer({ min: 1, max: 13 }),
        fc.integer({ min: 1, max: 3 }),
        fc.integer({ min: 1, max: 64 }),
        fc.integer({ min: 1, max: 3 }),
        fc.integer({ min: 0, max: 2 ** 31 - 1 }),
        async (format, n, blocks, m, threads, seed) => {
          const k = blocks * GGML_BLOCK_FORMATS[format].blockSize;
          const w = ggmlWeight(format, n, k, seed);
          const x = randomFloats(seededRandom(seed + 1), m * k, 2);
          const got = wasmMatmul(await runtime(threads, 'plain'), x, m, w, { shared: true });
          const local = wasmMatmul(await runtime(threads, 'plain'), x, m, w);
          expect(local).toEqual(got);
          for (const build of BUILDS.slice(1))
            expect(wasmMatmul(await runtime(threads, build), x, m, w, { shared: true })).toEqual(
              got,
            );
          const q = denseDots(w, quantizeLikeKernels(x), m);
          const want = matmulRef(x, m, w);
          const bound = dotBound(x, m, w);
          for (let i = 0; i < got.length; i++) {
            expect(Math.abs(got[i]! - q.dot[i]!)).toBeLessThanOrEqual(QX_TOL * q.abs[i]!);
            expect(Math.abs(got[i]! - want[i]!)).toBeLessThanOrEqual(DOT_TOL * bound[i]!);
          }
        },
      ),
      { numRuns: 40, seed: 19 },
    );
  });

  it('gives bit-identical results on 1, 2 and 3 threads and in every build, batches 1 to 64', async () => {
    for (const format of ['Q4_K', 'Q8_0', 'Q6_K', 'IQ4_NL'] as const) {
      const w = ggmlWeight(format, 70, 512, 7);
      const ms = [1, 8, 19, 64];
      const first: Float32Array[] = [];
      for (const build of BUILDS) {
        for (const threads of [1, 2, 3]) {
          const rt = await runtime(threads, build);
          ms.forEach((m, i) => {
            const y = wasmMatmul(rt, randomFloats(seededRandom(m), m * 512, 1), m, w, {
              shared: true,
            });
            if (first[i] === undefined) first[i] = y;
            else expect(y).toEqual(first[i]);
          });
        }
      }
    }
  });

  // The 8-bit codes of a NaN or an infinity are finite: without the scale carrying it, a broken
  // activation row would give finite logits and escape the sampler's non-finite check.
  for (const format of FORMATS) {
    it(`${format}: a row holding a NaN or an infinity gives non-finite outputs in that row only, the other rows the same bits`, async () => {
      const n = 6;
      const k = 2 * GGML_BLOCK_FORMATS[format].blockSize;
      const w = ggmlWeight(format, n, k, 11);
      for (const m of [1, 2, 5, 9]) {
        const clean = randomFloats(seededRandom(m), m * k, 1);
        // Row 0 a NaN, row 1 +Inf, row 3 -Inf, each away from a vector's first lane and in the
        // second block (so neither the first lane nor the first block alone decides).
        const bad = new Map<number, number>([
          [0, Number.NaN],
          [1, Number.POSITIVE_INFINITY],
          [3, Number.NEGATIVE_INFINITY],
        ]);
        const x = clean.slice();
        for (const [row, v] of bad) if (row < m) x[row * k + k - 3] = v;
        for (const build of BUILDS) {
          for (const threads of [1, 2]) {
            const rt = await runtime(threads, build);
            for (const shared of [false, true]) {
              const want = wasmMatmul(rt, clean, m, w, { shared });
              const got = wasmMatmul(rt, x, m, w, { shared });
              for (let i = 0; i < m; i++) {
                const row = got.subarray(i * n, (i + 1) * n);
                if (bad.has(i)) {
                  for (const v of row) expect(Number.isFinite(v)).toBe(false);
                } else {
                  expect(row).toEqual(want.subarray(i * n, (i + 1) * n));
                }
              }
            }
          }
        }
      }
    });
  }

  it('reads Q8_0 codes of -128 as -127 (the relaxed dot takes |code| as its 7-bit operand)', async () => {
    const k = 64;
    const w = ggmlWeight('Q8_0', 4, k, 3);
    const bytes = weightBytesView(w);
    // Every code of row 1 to -128 (ggml's quantizer writes none; a crafted file may).
    for (let b = 0; b < 2; b++) bytes.fill(0x80, (2 + b) * 34 + 2, (2 + b) * 34 + 34);
    const x = randomFloats(seededRandom(4), k, 1);
    for (const build of BUILDS) {
      const got = wasmMatmul(await runtime(2, build), x, 1, w);
      const clamped = { ...w, data: w.data.slice() };
      const cb = weightBytesView(clamped);
      for (let i = 0; i < cb.length; i++) if (cb[i] === 0x80 && i % 34 >= 2) cb[i] = 0x81;
      const q = denseDots(clamped, quantizeLikeKernels(x), 1);
      for (let j = 0; j < 4; j++)
        expect(Math.abs(got[j]! - q.dot[j]!)).toBeLessThanOrEqual(QX_TOL * q.abs[j]!);
    }
  });
});

describe('wasm embedding gather from GGML blocks', () => {
  for (const format of FORMATS) {
    it(`${format} rows equal embeddingRef within an f32 rounding`, async () => {
      const rt = await runtime(2, 'plain');
      const { arena } = rt;
      const k = GGML_BLOCK_FORMATS[format].blockSize === 256 ? 512 : 64;
      const table = ggmlWeight(format, 20, k, 13);
      const ids = Int32Array.of(3, 19, 0, 3, 17);
      const tw = uploadWeight(arena, table);
      const a = weightArgs(tw);
      const ip = arena.alloc(ids.length * 4);
      arena.i32(ip, ids.length).set(ids);
      const yp = arena.alloc(ids.length * k * 4);
      const p = rt.program(1);
      p.push(Op.embed, [ip, ids.length, tw.data, a.code, k, a.scales, a.gs, yp]);
      rt.run(p);
      const got = arena.f32(yp, ids.length * k).slice();
      const want = embeddingRef(ids, table);
      // The kernel applies scale and offset in two f32 operations, ggml's decoder in one.
      expect(maxRelDiff(got, want)).toBeLessThan(2e-7);
      expect(weightBytesView(table).length).toBeGreaterThan(0);
    });
  }
});
