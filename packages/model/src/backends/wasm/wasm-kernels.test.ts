import { randomFloats, seededRandom } from '@kvasir/test-utils';
import { describe, expect, it } from 'vitest';
import { embeddingRef, matmulRef, rmsNormRef } from '../../kernels/reference.js';
import { type PackedWeight, packWeight, type WeightFormat } from '../../kernels/weight-format.js';
import { maxRelDiff } from '../../testing/compare.js';
import { wasmRuntimes } from '../../testing/wasm-runtimes.js';
import { EpilogueCode, f32Word, Op } from './wasm-program.js';
import type { WasmRuntime } from './wasm-runtime.js';
import { uploadWeight, weightArgs } from './wasm-weights.js';

// Tolerances: the kernels accumulate in f32 (four lanes, then a horizontal sum), the
// references in f64; over k ≤ 2048 terms that is a few f32 ulps of the largest partial sum.
const MATMUL_TOL = 2e-6;
// int8 decode rounds x to 16 bits per weight group for integer dot products: 2^-16 of the
// group's largest |x|, a hundredth of what the weights' own 8-bit rounding costs.
const INT8_DECODE_TOL = 5e-5;
const NORM_TOL = 1e-6;

const runtime = wasmRuntimes();

/** Runs one matmul op on `rt` and returns y. */
function wasmMatmul(
  rt: WasmRuntime,
  x: Float32Array,
  m: number,
  w: PackedWeight,
  opts: { bias?: Float32Array; epilogue?: keyof typeof EpilogueCode; out?: Float32Array } = {},
): Float32Array {
  const { arena } = rt;
  const ww = uploadWeight(arena, w);
  const a = weightArgs(ww);
  const xp = arena.alloc(x.length * 4);
  arena.f32(xp, x.length).set(x);
  const outCols = opts.epilogue?.startsWith('swiglu') ? w.rows / 2 : w.rows;
  const yp = arena.alloc(m * outCols * 4);
  if (opts.out) arena.f32(yp, m * outCols).set(opts.out);
  let bp = 0;
  if (opts.bias) {
    bp = arena.alloc(opts.bias.length * 4);
    arena.f32(bp, opts.bias.length).set(opts.bias);
  }
  const stride = (4 * w.cols + 64) * 4;
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

const shapes = [
  // rows, cols, tokens: a 4-row tail, f16's 4-column tail, the batched path past one
  // 64-token block, odd token counts (a token pair with one row)
  { n: 10, k: 12, m: 1 },
  { n: 36, k: 64, m: 3 },
  { n: 64, k: 96, m: 70 },
  { n: 130, k: 256, m: 1 },
];

describe('wasm matmul', () => {
  for (const format of ['f32', 'f16', 'int8'] as WeightFormat[]) {
    for (const { n, k, m } of shapes) {
      for (const epilogue of ['store', 'residual', 'swiglu', 'swiglu-oai'] as const) {
        const tol = format === 'int8' && m === 1 ? INT8_DECODE_TOL : MATMUL_TOL;
        it(`${format} ${n}x${k}, ${m} tokens, ${epilogue}: matches matmulRef within ${tol}`, async () => {
          const rt = await runtime(2);
          const rnd = seededRandom(n * 1000 + k * 10 + m);
          const gs = k % 32 === 0 ? 32 : 4;
          const w = packWeight(randomFloats(rnd, n * k, 0.5), n, k, format, gs);
          const x = randomFloats(rnd, m * k, 1);
          const bias = randomFloats(rnd, n, 0.1);
          const outCols = epilogue.startsWith('swiglu') ? n / 2 : n;
          const residual = randomFloats(rnd, m * outCols, 1);
          const want = matmulRef(x, m, w, { bias, epilogue, out: residual.slice() });
          const got = wasmMatmul(rt, x, m, w, { bias, epilogue, out: residual });
          expect(maxRelDiff(got, want)).toBeLessThan(tol);
        });
      }
    }
  }

  it('gives bit-identical results on 1, 2 and 3 threads', async () => {
    const rnd = seededRandom(7);
    const w = packWeight(randomFloats(rnd, 70 * 64, 0.5), 70, 64, 'f16', 32);
    const results: Float32Array[] = [];
    for (const threads of [1, 2, 3]) {
      const rt = await runtime(threads);
      for (const m of [1, 5]) {
        const x = randomFloats(seededRandom(m), m * 64, 1);
        results.push(wasmMatmul(rt, x, m, w));
      }
    }
    expect(results[2]).toEqual(results[0]);
    expect(results[4]).toEqual(results[0]);
    expect(results[3]).toEqual(results[1]);
    expect(results[5]).toEqual(results[1]);
  });
});

describe('wasm rmsNorm and embedding', () => {
  it('RMSNorm (with a row gather) matches rmsNormRef', async () => {
    const rt = await runtime(3);
    const { arena } = rt;
    const rnd = seededRandom(3);
    const m = 5;
    const h = 24;
    const x = randomFloats(rnd, m * h, 2);
    const weight = randomFloats(rnd, h, 1);
    const rows = Int32Array.of(4, 0, 4);
    const xp = arena.alloc(x.length * 4);
    arena.f32(xp, x.length).set(x);
    const wp = arena.alloc(h * 4);
    arena.f32(wp, h).set(weight);
    const rp = arena.alloc(rows.length * 4);
    arena.i32(rp, rows.length).set(rows);
    const yp = arena.alloc(m * h * 4);
    const gp = arena.alloc(rows.length * h * 4);
    const p = rt.program(2);
    p.push(Op.rmsNorm, [xp, m, h, wp, f32Word(1e-5), yp, 0]);
    p.push(Op.rmsNorm, [xp, rows.length, h, wp, f32Word(1e-5), gp, rp]);
    rt.run(p);
    expect(maxRelDiff(arena.f32(yp, m * h), rmsNormRef(x, m, h, weight, 1e-5))).toBeLessThan(
      NORM_TOL,
    );
    expect(
      maxRelDiff(arena.f32(gp, rows.length * h), rmsNormRef(x, 3, h, weight, 1e-5, rows)),
    ).toBeLessThan(NORM_TOL);
  });

  for (const format of ['f32', 'f16', 'int8'] as WeightFormat[]) {
    it(`embedding gather of ${format} rows equals embeddingRef exactly`, async () => {
      const rt = await runtime(2);
      const { arena } = rt;
      const rnd = seededRandom(11);
      const table = packWeight(randomFloats(rnd, 50 * 40, 1), 50, 40, format, 8);
      const ids = Int32Array.of(3, 49, 0, 3, 17);
      const tw = uploadWeight(arena, table);
      const a = weightArgs(tw);
      const ip = arena.alloc(ids.length * 4);
      arena.i32(ip, ids.length).set(ids);
      const yp = arena.alloc(ids.length * 40 * 4);
      const p = rt.program(1);
      p.push(Op.embed, [ip, ids.length, tw.data, a.code, 40, a.scales, a.gs, yp]);
      rt.run(p);
      expect(arena.f32(yp, ids.length * 40).slice()).toEqual(embeddingRef(ids, table));
    });
  }
});
