// Decode attention through @kvasir/attention-kernels' paged kernels, per KV format: the output
// cosine against an f32 cache and the decode time relative to f16, measured in one run.
//
// @kvasir/attention-kernels depends on this package, so it cannot be a dependency here (the
// workspace graph would be cyclic); the benchmark loads its built entry point from the
// monorepo when it is there (`pnpm --filter @kvasir/attention-kernels... build`), and reports
// why not otherwise. KVASIR_ATTENTION_KERNELS=<path to a module> overrides the location.

import { existsSync } from 'node:fs';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { createGpu } from '@kvasir/gpu';
import { compareTensors } from '../src/index.js';
import { gaussian, keysWithOutliers } from '../src/synthetic.test-util.js';

// biome-ignore lint/suspicious/noExplicitAny: the module is loaded by path, untyped on purpose.
type AnyModule = any;

/** Figures per format: cosine vs f32 at the first context, decode time ÷ f16 per context. */
export type KernelFigures =
  | { readonly unavailable: string }
  | {
      readonly adapter: string;
      readonly contexts: readonly number[];
      readonly formats: Record<string, Record<string, number>>;
    };

/** Decodes per timed submission when the adapter has timestamp queries. */
const REPEAT = 20;

async function loadKernels(): Promise<AnyModule | string> {
  const override = process.env.KVASIR_ATTENTION_KERNELS;
  const url = override
    ? pathToFileURL(override).href
    : new URL('../../attention-kernels/dist/index.js', import.meta.url).href;
  if (!override && !existsSync(fileURLToPath(url))) {
    return 'attention-kernels is not built (pnpm --filter @kvasir/attention-kernels... build)';
  }
  const m = await import(url);
  const needed = ['PagedDecodeAttention', 'WriteKvCache', 'f32Format', 'f16Format', 'int8KvFormat'];
  const missing = needed.filter((n) => m[n] === undefined);
  return missing.length > 0 ? `attention-kernels does not export ${missing.join(', ')}` : m;
}

/**
 * Runs decode for one sequence of each context with GQA `qHeads`/`kvHeads`, head dim
 * `headDim`, block size 16, timing `reps` runs after a warm-up (the fastest: the machine is
 * shared, and interference only ever adds time).
 */
export async function kernelFigures(o: {
  qHeads: number;
  kvHeads: number;
  headDim: number;
  contexts: readonly number[];
  reps: number;
  outlierEvery: number;
  outlierScale: number;
}): Promise<KernelFigures> {
  const ak = await loadKernels();
  if (typeof ak === 'string') return { unavailable: ak };
  const gpu = await createGpu();
  try {
    const blockSize = 16;
    // Formats an older build lacks are left out rather than failing the run.
    const formats = [
      ['f32', ak.f32Format],
      ['f16', ak.f16Format],
      ['int8', ak.int8KvFormat],
      ['fp8-e4m3', ak.fp8E4m3KvFormat],
      ['fp8-e5m2', ak.fp8E5m2KvFormat],
      ['int4-g32', ak.int4KvFormat],
      ['int8-h8', ak.int8H8KvFormat],
      ['int4-g32-h32', ak.int4H32KvFormat],
    ].filter(([, f]) => f !== undefined) as [string, AnyModule][];
    const times: Record<string, number[]> = {};
    const cosine: Record<string, number> = {};
    for (const [ci, ctx] of o.contexts.entries()) {
      const blocks = Math.ceil(ctx / blockSize);
      const key = keysWithOutliers(ctx, o.kvHeads, o.headDim, 1, o.outlierEvery, o.outlierScale);
      const value = gaussian(ctx * o.kvHeads * o.headDim, 2);
      const query = gaussian(o.qHeads * o.headDim, 3);
      const slots = Int32Array.from({ length: ctx }, (_, i) => i);
      const blockTables = Uint32Array.from({ length: blocks }, (_, i) => i);
      const k = gpu.storageBuffer(key);
      const v = gpu.storageBuffer(value);
      const sm = gpu.storageBuffer(slots);
      const q = gpu.storageBuffer(query);
      const runs: {
        name: string;
        once: () => Promise<number>;
        out: GPUBuffer;
        free: () => void;
      }[] = [];
      // The f32 cache is only the accuracy reference, at the first context.
      for (const [name, format] of formats.filter(([n]) => n !== 'f32' || ci === 0)) {
        const config = {
          numQHeads: o.qHeads,
          numKvHeads: o.kvHeads,
          headDim: o.headDim,
          blockSize,
          format,
        };
        const kvCache = gpu.storageBuffer(blocks * ak.kvCacheLayout(config).blockWords * 4);
        const writer = await ak.WriteKvCache.create(gpu, config);
        await writer.run({ key: k, value: v, slotMapping: sm, kvCache, numTokens: ctx });
        const decode = await ak.PagedDecodeAttention.create(gpu, config);
        const plan = decode.plan({
          blockTables,
          contextLens: Uint32Array.of(ctx),
          numSeqs: 1,
          maxBlocksPerSeq: blocks,
        });
        const out = gpu.storageBuffer(query.length * 4);
        const encode = (enc: GPUCommandEncoder): void =>
          decode.encode(enc, { plan, query: q, kvCache, output: out });
        // GPU time per decode: timestamps around REPEAT decodes in one submission where the
        // adapter has them (a single decode here is tens of microseconds on a GPU, less than
        // one submission's round trip), wall-clock around one otherwise.
        const once = async (): Promise<number> => {
          if (!gpu.hasTimestamps) {
            const t0 = performance.now();
            await gpu.run(encode);
            return performance.now() - t0;
          }
          const t = await gpu.time((enc) => {
            for (let r = 0; r < REPEAT; r++) encode(enc);
          });
          gpu.uniforms.reset();
          return t.ms / REPEAT;
        };
        await gpu.run(encode);
        runs.push({
          name,
          once,
          out,
          free: () => {
            plan.release();
            gpu.releaseBuffer(kvCache);
            gpu.releaseBuffer(out);
          },
        });
      }
      if (ci === 0) {
        const reference = new Float32Array(await gpu.readBuffer(runs[0]!.out));
        for (const r of runs.slice(1)) {
          cosine[r.name] = compareTensors(
            reference,
            new Float32Array(await gpu.readBuffer(r.out)),
          ).cosine;
        }
      }
      // Formats take turns in every repetition, so load from other jobs hits them alike.
      const best: Record<string, number> = {};
      for (let rep = 0; rep < o.reps; rep++) {
        for (const r of runs) {
          if (r.name === 'f32') continue;
          const t = await r.once();
          best[r.name] = Math.min(best[r.name] ?? Number.POSITIVE_INFINITY, t);
        }
      }
      for (const [name, t] of Object.entries(best)) {
        const list = times[name] ?? [];
        list.push(t);
        times[name] = list;
      }
      for (const r of runs) r.free();
      for (const b of [k, v, sm, q]) gpu.releaseBuffer(b);
    }
    const result: Record<string, Record<string, number>> = {};
    for (const [name] of formats) {
      if (name === 'f32') continue;
      const row: Record<string, number> = {};
      if (cosine[name] !== undefined) row[`cosine_vs_f32_ctx${o.contexts[0]}`] = cosine[name]!;
      o.contexts.forEach((ctx, i) => {
        row[`decode_time_vs_f16_ctx${ctx}`] = times[name]![i]! / times.f16![i]!;
      });
      result[name] = row;
    }
    return { adapter: gpu.describe(), contexts: o.contexts, formats: result };
  } finally {
    gpu.destroy();
  }
}
