// The GGML matmul kernels alone, on the 110M config's shapes (ggml-kernels-core.ts), on one
// thread unless told: fastest-of-N because the machines here are shared, the minimum is the
// run the others disturbed least. Runs unchanged against an older checkout (without the quantize
// op it times the matmul alone, which then rounds x itself).
//   tsx bench/ggml-kernels.ts [threads] [reps] [plain|relaxed|-] [Q4_K,Q6_K] [1,8]
// (`-`: the build the runtime picks; the last two narrow the formats and batches.)
// Prints one JSON object: microseconds per op, and multiply-adds per nanosecond.
import type { GgmlBlockType } from '@kvasir/quantizer/ggml';
import { createWasmRuntime } from '../src/backends/wasm/wasm-runtime.js';
import { benchGgmlKernels } from './ggml-kernels-core.js';

const [threadsArg = '1', repsArg = '7', buildArg = '-', formatsArg, batchesArg] =
  process.argv.slice(2);
const build = buildArg === '-' ? undefined : buildArg;
const threads = Number(threadsArg);
const reps = Number(repsArg);
const rt = await createWasmRuntime({
  threads,
  reserveBytes: 96 << 20,
  ...(build ? { build: build as 'plain' } : {}),
});
const results = benchGgmlKernels(rt, reps, () => performance.now(), {
  ...(formatsArg ? { formats: formatsArg.split(',') as GgmlBlockType[] } : {}),
  ...(batchesArg ? { batches: batchesArg.split(',').map(Number) } : {}),
});
await rt.close();
console.log(JSON.stringify({ threads, reps, build: rt.build ?? 'single', results }));
