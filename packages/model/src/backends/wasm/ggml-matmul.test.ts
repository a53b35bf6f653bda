import { GGML_BLOCK_FORMATS, type GgmlBlockType } from '@kvasir/quantizer/ggml';
import { randomFloats, seededRandom } from '@kvasir/test-utils';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { embeddingRef, matmulRef } from '../../kernels/reference.js';
import {
  type GgmlWeight,
  unpackWeight,
  weightBytesView,
  weightWords,
} from '../../kernels/weight-format.js';
import { maxRelDiff } from '../../testing/compare.js';
import { wasmRuntimes } from '../../testing/wasm-runtimes.js';
import { EpilogueCode, Op } from './wasm-program.js';
import type { WasmRuntime } from './wasm-runtime.js';
import { uploadWeight, weightArgs } from './wasm-weights.js';

// The kernels round x to int16 per block of 32 (2^-16 of the block's largest |x|) and sum in
// f32; the reference decodes the blocks exactly and sums in f64. So each result is within
// 2^-15 of Σ_c |w_c| · max|x| over c's block (the bound `dotBound` computes).
const DOT_TOL = 2 ** -15;
// Through the epilogues (SiLU, residual), relative to the largest output.
const EPILOGUE_TOL = 5e-5;

const FORMATS = Object.keys(GGML_BLOCK_FORMATS) as GgmlBlockType[];

const runtime = wasmRuntimes();

/** `rows × cols` random weights (some rows shifted, so minimums go negative and positive), in blocks. */
function ggmlWeight(format: GgmlBlockType, rows: number, cols: number, seed: number): GgmlWeight {
  const rnd = seededRandom(seed);
  const values = randomFloats(rnd, rows * cols, 0.5);
  for (let r = 0; r < rows; r += 3) for (let c = 0; c < cols; c++) values[r * cols + c]! += 0.3;
  const data = new Uint32Array(weightWords(format, rows, cols));
  GGML_BLOCK_FORMATS[format].quantize(values, 0, new Uint8Array(data.buffer), 0, rows * cols);
  return { format, rows, cols, data, scales: undefined, groupSize: 0 };
}

/** Runs one matmul op on `rt` and returns y. */
function wasmMatmul(
  rt: WasmRuntime,
  x: Float32Array,
  m: number,
  w: GgmlWeight,
  opts: { bias?: Float32Array; epilogue?: keyof typeof EpilogueCode; out?: Float32Array } = {},
): Float32Array {
  const { arena } = rt;
  const ww = uploadWeight(arena, w);
  const a = weightArgs(ww);
  const xp = arena.alloc(x.length * 4);
  arena.f32(xp, x.length).set(x);
  const outCols = opts.epilogue === 'swiglu' ? w.rows / 2 : w.rows;
  const yp = arena.alloc(m * outCols * 4);
  if (opts.out) arena.f32(yp, m * outCols).set(opts.out);
  let bp = 0;
  if (opts.bias) {
    bp = arena.alloc(opts.bias.length * 4);
    arena.f32(bp, opts.bias.length).set(opts.bias);
  }
  // GGML_SCRATCH_FLOATS_PER_COL (c/ggml-matmul.h) floats per column and thread.
  const stride = 11 * w.cols * 4;
  const scratch = arena.alloc(stride * rt.pool.threads);
  const p = rt.program(1);
  p.push(Op.matmul, [
    xp,
    m,
    w.cols,
    ww.data,
    w.rows,
    a.code,
    a.scales,
    a.gs,
    bp,
    yp,
    EpilogueCode[opts.epilogue ?? 'store'],
    scratch,
    stride,
  ]);
  rt.run(p);
  return arena.f32(yp, m * outCols).slice();
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
  // tokens (decode; an odd count for the 2×2 tiles; past one 16-token block)
  const shapes = [
    { n: 10, m: 1 },
    { n: 7, m: 1 },
    { n: 7, m: 3 },
    { n: 36, m: 3 },
    { n: 20, m: 21 },
  ];
  for (const format of FORMATS) {
    const bs = GGML_BLOCK_FORMATS[format].blockSize;
    // Legacy formats: 3 blocks (groups of 16 not a multiple of 4, the offsets' scalar tail).
    const k = bs === 256 ? 512 : 96;
    for (const { n, m } of shapes) {
      it(`${format} ${n}x${k}, ${m} tokens: within ${DOT_TOL} of the f64 dot of the decoded blocks`, async () => {
        const rt = await runtime(2);
        const w = ggmlWeight(format, n, k, n * 31 + m);
        const x = randomFloats(seededRandom(m * 7 + n), m * k, 1);
        const want = matmulRef(x, m, w);
        const got = wasmMatmul(rt, x, m, w);
        const bound = dotBound(x, m, w);
        let worst = 0;
        for (let i = 0; i < got.length; i++)
          worst = Math.max(worst, Math.abs(got[i]! - want[i]!) / bound[i]!);
        expect(worst).toBeLessThan(DOT_TOL);
        // Not vacuous: the results are the weights' dot products, not zeros.
        expect(maxRelDiff(new Float32Array(want.length), want)).toBeGreaterThan(0.05);
      });
    }
    for (const epilogue of ['residual', 'swiglu'] as const) {
      it(`${format} with bias, ${epilogue}: matches matmulRef within ${EPILOGUE_TOL}`, async () => {
        const rt = await runtime(3);
        const n = 12;
        const m = 5;
        const rnd = seededRandom(5);
        const w = ggmlWeight(format, n, k, 99);
        const x = randomFloats(rnd, m * k, 1);
        const bias = randomFloats(rnd, n, 0.1);
        const outCols = epilogue === 'swiglu' ? n / 2 : n;
        const residual = randomFloats(rnd, m * outCols, 1);
        const want = matmulRef(x, m, w, { bias, epilogue, out: residual.slice() });
        const got = wasmMatmul(rt, x, m, w, { bias, epilogue, out: residual });
        expect(maxRelDiff(got, want)).toBeLessThan(EPILOGUE_TOL);
      });
    }
  }

  it('any type, shape, token count and thread count: within the bound of the decoded blocks', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom(...FORMATS),
        fc.integer({ min: 1, max: 13 }),
        fc.integer({ min: 1, max: 3 }),
        fc.integer({ min: 1, max: 19 }),
        fc.integer({ min: 1, max: 3 }),
        fc.integer({ min: 0, max: 2 ** 31 - 1 }),
        async (format, n, blocks, m, threads, seed) => {
          const k = blocks * GGML_BLOCK_FORMATS[format].blockSize;
          const w = ggmlWeight(format, n, k, seed);
          const x = randomFloats(seededRandom(seed + 1), m * k, 2);
          const got = wasmMatmul(await runtime(threads), x, m, w);
          const want = matmulRef(x, m, w);
          const bound = dotBound(x, m, w);
          for (let i = 0; i < got.length; i++)
            expect(Math.abs(got[i]! - want[i]!)).toBeLessThanOrEqual(DOT_TOL * bound[i]!);
        },
      ),
      { numRuns: 40, seed: 19 },
    );
  });

  it('gives bit-identical results on 1, 2 and 3 threads', async () => {
    for (const format of ['Q4_K', 'Q8_0'] as const) {
      const w = ggmlWeight(format, 70, 512, 7);
      const results: Float32Array[] = [];
      for (const threads of [1, 2, 3]) {
        const rt = await runtime(threads);
        for (const m of [1, 19])
          results.push(wasmMatmul(rt, randomFloats(seededRandom(m), m * 512, 1), m, w));
      }
      expect(results[2]).toEqual(results[0]);
      expect(results[4]).toEqual(results[0]);
      expect(results[3]).toEqual(results[1]);
      expect(results[5]).toEqual(results[1]);
    }
  });
});

describe('wasm embedding gather from GGML blocks', () => {
  for (const format of FORMATS) {
    it(`${format} rows equal embeddingRef within an f32 rounding`, async () => {
      const rt = await runtime(2);
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
