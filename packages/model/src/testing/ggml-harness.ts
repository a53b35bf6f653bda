// Shared by the GGML matmul tests in Node (backends/wasm/ggml-matmul.test.ts) and in Chromium
// (testing/browser/wasm-worker.ts): random block weights, one matmul op on a runtime, and a
// fixed set of cases whose result bits the browser test compares across runtimes and builds.
import { GGML_BLOCK_FORMATS, type GgmlBlockType } from '@kvasir/quantizer/ggml';
import { randomFloats, seededRandom } from '@kvasir/test-utils';
import { EpilogueCode, Op, quantizedRowBytes } from '../backends/wasm/wasm-program.js';
import type { WasmRuntime } from '../backends/wasm/wasm-runtime.js';
import { uploadWeight, weightArgs } from '../backends/wasm/wasm-weights.js';
import { type GgmlWeight, weightWords } from '../kernels/weight-format.js';

/** `rows × cols` random weights (some rows shifted, so minimums go negative and positive), in blocks. */
export function ggmlWeight(
  format: GgmlBlockType,
  rows: number,
  cols: number,
  seed: number,
): GgmlWeight {
  const rnd = seededRandom(seed);
  const values = randomFloats(rnd, rows * cols, 0.5);
  for (let r = 0; r < rows; r += 3) for (let c = 0; c < cols; c++) values[r * cols + c]! += 0.3;
  const data = new Uint32Array(weightWords(format, rows, cols));
  GGML_BLOCK_FORMATS[format].quantize(values, 0, new Uint8Array(data.buffer), 0, rows * cols);
  return { format, rows, cols, data, scales: undefined, groupSize: 0 };
}

/** Runs one matmul op on `rt` and returns y. */
export function ggmlMatmul(
  rt: WasmRuntime,
  x: Float32Array,
  m: number,
  w: GgmlWeight,
  opts: {
    bias?: Float32Array;
    epilogue?: keyof typeof EpilogueCode;
    out?: Float32Array;
    /** Quantize x first in an op of its own (as the executor does), not inside the matmul. */
    shared?: boolean;
  } = {},
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
  // GGML_SCRATCH_FLOATS_PER_COL (c/ggml-matmul.h) floats per column and thread.
  const stride = 11 * w.cols * 4;
  const scratch = arena.alloc(stride * rt.pool.threads);
  const p = rt.program(2);
  let xq = 0;
  if (opts.shared) {
    xq = arena.alloc(m * quantizedRowBytes(w.cols));
    p.push(Op.quantize, [xp, m, w.cols, xq]).barrier();
  }
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
    xq,
  ]);
  rt.run(p);
  return arena.f32(yp, m * outCols).slice();
}

/**
 * Every GGML type at decode (1 token, the fused kernels where a type has one), a small batch
 * quantized inside the matmul, and a ragged batch of 21 quantized by its own op: each case's
 * result as f32 bits.
 */
export function ggmlKernelCaseBits(rt: WasmRuntime): number[][] {
  const out: number[][] = [];
  for (const format of Object.keys(GGML_BLOCK_FORMATS) as GgmlBlockType[]) {
    const k = GGML_BLOCK_FORMATS[format].blockSize === 256 ? 512 : 96;
    for (const [n, m, shared] of [
      [10, 1, false],
      [7, 3, false],
      [20, 21, true],
    ] as const) {
      const w = ggmlWeight(format, n, k, n * 31 + m);
      const x = randomFloats(seededRandom(m * 7 + n), m * k, 1);
      const y = ggmlMatmul(rt, x, m, w, { shared });
      out.push(Array.from(new Uint32Array(y.buffer, y.byteOffset, y.length)));
    }
  }
  return out;
}
