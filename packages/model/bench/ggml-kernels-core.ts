// The GGML matmul kernel bench's body, shared by Node (ggml-kernels.ts) and Chromium
// (ggml-kernels-browser.ts): each format × shape × batch as one program (activations quantized by
// their own op where the kernels have it, then the matmul), fastest of `reps` runs.
import { GGML_BLOCK_FORMATS, type GgmlBlockType } from '@kvasir/quantizer/ggml';
import { randomFloats, seededRandom } from '@kvasir/test-utils';
import * as program from '../src/backends/wasm/wasm-program.js';
import type { WasmRuntime } from '../src/backends/wasm/wasm-runtime.js';
import { uploadWeight, weightArgs } from '../src/backends/wasm/wasm-weights.js';
import { type GgmlWeight, weightWords } from '../src/kernels/weight-format.js';

const FORMATS: GgmlBlockType[] = ['Q8_0', 'Q4_0', 'Q4_K', 'Q6_K'];
// gate_up (interleaved gate and up rows: 2 · 2048 × 768), down (768 × 2048).
const SHAPES = [
  { name: 'gate_up', n: 4096, k: 768 },
  { name: 'down', n: 768, k: 2048 },
];
const BATCHES = [1, 8, 64];

/** One kernel case's fastest run. */
export interface KernelTiming {
  readonly format: string;
  readonly shape: string;
  readonly m: number;
  readonly us: number;
  readonly mac_per_ns: number;
}

/** Which cases to time: every format and batch unless told. */
export interface KernelCases {
  readonly formats?: readonly GgmlBlockType[];
  readonly batches?: readonly number[];
}

/** The cases on `rt`, fastest of `reps` runs each (`rt` needs about 64 MiB). */
export function benchGgmlKernels(
  rt: WasmRuntime,
  reps: number,
  now: () => number,
  cases: KernelCases = {},
): KernelTiming[] {
  const Op = program.Op as Record<string, number>;
  const rowBytes = (program as unknown as { quantizedRowBytes?: (k: number) => number })
    .quantizedRowBytes;
  const { arena } = rt;
  const threads = rt.pool.threads;
  const results: KernelTiming[] = [];
  for (const format of cases.formats ?? FORMATS) {
    for (const shape of SHAPES) {
      const { n, k } = shape;
      const values = randomFloats(seededRandom(n + k), n * k, 0.5);
      const data = new Uint32Array(weightWords(format, n, k));
      GGML_BLOCK_FORMATS[format].quantize(values, 0, new Uint8Array(data.buffer), 0, n * k);
      const w: GgmlWeight = { format, rows: n, cols: k, data, scales: undefined, groupSize: 0 };
      const ww = uploadWeight(arena, w);
      const a = weightArgs(ww);
      for (const m of cases.batches ?? BATCHES) {
        const x = randomFloats(seededRandom(m), m * k, 1);
        const xp = arena.alloc(x.length * 4);
        arena.f32(xp, x.length).set(x);
        const yp = arena.alloc(m * n * 4);
        const stride = 11 * k * 4;
        const scratch = arena.alloc(stride * threads);
        const p = rt.program(2);
        let xq = 0;
        if (Op.quantize !== undefined && rowBytes) {
          xq = arena.alloc(m * rowBytes(k));
          p.push(Op.quantize, [xp, m, k, xq]).barrier();
        }
        const args = [xp, m, k, ww.data, n, a.code, a.scales, a.gs, 0, yp, 0, scratch, stride, xq];
        p.push(Op.matmul as number, args);
        rt.run(p);
        let best = Number.POSITIVE_INFINITY;
        for (let r = 0; r < reps; r++) {
          const t0 = now();
          rt.run(p);
          best = Math.min(best, now() - t0);
        }
        results.push({
          format,
          shape: shape.name,
          m,
          us: Number((best * 1000).toFixed(1)),
          mac_per_ns: Number(((m * n * k) / (best * 1e6)).toFixed(3)),
        });
      }
    }
  }
  return results;
}
