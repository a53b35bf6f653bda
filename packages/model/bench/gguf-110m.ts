// GGUF weight types on each backend: the ~110M Llama as F16, Q8_0, Q6_K and Q4_K_M
// GGUF files, decode at batch 1 and 8 with the blocks multiplied in place, each against the
// backend's own streaming read measured around it. The F16 file is tooling/llama.cpp's
// make-random-gguf.ts model; the others are llama.cpp's llama-quantize of it when
// tooling/llama.cpp/build has it (Q4_K_M mixes Q4_K and Q6_K as llama.cpp does), else Kvasir's
// own converter in one type per file (Q4_K for Q4_K_M). Files are cached in .kvasir-cache/.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type ModelConfig, makeModelConfig } from '../src/config.js';
import { convertToGguf } from '../src/formats/gguf/convert.js';
import { openGgufCheckpoint } from '../src/formats/gguf/reader.js';
import { writeRandomCheckpoint } from '../src/formats/random-checkpoint.js';
import type { BackendName } from '../src/model/backend-select.js';
import { loadModel, type Model } from '../src/model/model.js';
import { BLOCK, decodePlan, LLAMA_110M, prefillPlan, timeSteps } from './plans.js';

const root = join(dirname(fileURLToPath(import.meta.url)), '../../..');
const cache = join(root, '.kvasir-cache');
const quantizeBin = join(root, 'tooling/llama.cpp/build/bin/llama-quantize');

/** The issue-18 comparison model (make-random-gguf.ts: seed 18, MHA). */
export const CONFIG_110M: ModelConfig = makeModelConfig({ ...LLAMA_110M, numKvHeads: 12 });

/** The weight types measured: the float baseline and the common llama.cpp quantizations. */
export const GGUF_TYPES = ['F16', 'Q8_0', 'Q6_K', 'Q4_K_M'] as const;
type GgufType = (typeof GGUF_TYPES)[number];

/** The cached GGUF of `type`, made if missing; `how` says which tool made it. */
async function ggufFile(type: GgufType): Promise<{ path: string; how: string }> {
  mkdirSync(cache, { recursive: true });
  const f16 = join(cache, 'issue18-110m-F16-kv12.gguf');
  if (!existsSync(f16)) {
    const dir = await mkdtemp(join(tmpdir(), 'kvasir-110m-'));
    try {
      await writeRandomCheckpoint(dir, CONFIG_110M, 18);
      await convertToGguf(dir, f16, { dtype: 'F16' });
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }
  if (type === 'F16') return { path: f16, how: 'kvasir convertToGguf' };
  const quantized = join(cache, `issue18-110m-${type}-kv12.gguf`);
  if (existsSync(quantizeBin)) {
    if (!existsSync(quantized))
      execFileSync(quantizeBin, [f16, quantized, type], { stdio: 'ignore' });
    return { path: quantized, how: 'llama-quantize' };
  }
  const own = join(cache, `issue18-110m-${type}-kv12-kvasir.gguf`);
  if (!existsSync(own)) {
    const dir = await mkdtemp(join(tmpdir(), 'kvasir-110m-'));
    try {
      await writeRandomCheckpoint(dir, CONFIG_110M, 18);
      await convertToGguf(dir, own, { dtype: type === 'Q4_K_M' ? 'Q4_K' : type });
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }
  return { path: own, how: `kvasir convertToGguf (${type === 'Q4_K_M' ? 'Q4_K' : type})` };
}

/** Bytes of the matrices one decode step reads as stored (the tied embedding once, as LM head). */
async function stepWeightBytes(path: string): Promise<{ bytes: number; types: string[] }> {
  const reader = await openGgufCheckpoint(path);
  try {
    let bytes = 0;
    const types = new Set<string>();
    for (const [name, t] of reader.tensors) {
      if (t.shape.length !== 2) continue;
      types.add(t.dtype);
      if (name !== 'model.embed_tokens.weight' || reader.config.tieWordEmbeddings)
        bytes += t.byteLength;
    }
    return { bytes, types: [...types].sort() };
  } finally {
    await reader.close();
  }
}

const median = (v: number[]) => {
  const s = [...v].sort((a, b) => a - b);
  const h = s.length >> 1;
  return s.length % 2 ? (s[h] as number) : ((s[h - 1] as number) + (s[h] as number)) / 2;
};

/** How {@link benchGguf110m} runs on one backend. */
export interface GgufBenchOptions {
  readonly backend: BackendName;
  /** wasm threads. */
  readonly threads?: number;
  /** A shared `@kvasir/gpu` `Gpu` (WebGPU). */
  readonly gpu?: unknown;
  /** The backend's own streaming read in GB/s, taken just before and after each batch-1 timing. */
  readonly stream: () => number | Promise<number>;
  /** Decode steps timed per model and round at batch 1 and at batch 8. */
  readonly steps: { readonly 1: number; readonly 8: number };
  /** Tokens of one prompt prefilled per model and round (`prefill_tok_s_pp<n>`); none if unset. */
  readonly prefill?: number;
  readonly rounds: number;
  /**
   * Untimed warm-up: a 16-token prompt and a decode step at batch 1 and 8 (WebGPU compiles its
   * pipelines there). `'decode-b1'` only: on the CPU reference one batch-8 step costs as much
   * as the timed one.
   */
  readonly warmup: 'full' | 'decode-b1';
  readonly log: (s: string) => void;
}

/**
 * Decode tok/s at batch 1 and 8 (and their ratio, `decode_b8_over_b1`), one `prefill`-token prompt
 * when asked (`prefill_tok_s_pp<n>`), for each type on one backend, `*_vs_roofline` = (stored weight
 * bytes + KV bytes read per step) × steps/s ÷ the backend's streaming read (`stream`, taken just
 * before and after each model's batch-1 steps), and Q4_K_M's batch-1 speed-up over F16. All four
 * models stay loaded and take turns, `rounds` rounds (the starting model rotating): on a shared
 * machine whose speed drifts, each figure is the median over rounds (`*_best`: the fastest
 * round, what the kernels do when the cores are free), and the speed-up the median of the
 * per-round ratios (and the ratio of the bests). Keys start with the backend's name
 * (`wasm_gguf_110m_q4_k_m`, `webgpu_gguf_...`).
 */
export async function benchGguf110m(o: GgufBenchOptions): Promise<Record<string, unknown>> {
  const c = CONFIG_110M;
  const kvRow = c.numLayers * c.numKvHeads * c.headDim * 2 * 2;
  const runs: {
    type: string;
    model: Model;
    info: Record<string, unknown>;
    bytes: number;
    b1: number[];
    b8: number[];
    pp: number[];
    roofline: number[];
    bw: number[];
  }[] = [];
  const pp = o.prefill ?? 0;
  const ppBlocks = Math.ceil(pp / BLOCK);
  const plans = (batch: 1 | 8) =>
    Array.from({ length: o.steps[batch] }, (_, s) => decodePlan(batch, 1 + s));
  try {
    for (const type of GGUF_TYPES) {
      const { path, how } = await ggufFile(type);
      const { bytes, types } = await stepWeightBytes(path);
      const t0 = performance.now();
      const model = await loadModel(path, {
        backend: o.backend,
        threads: o.threads,
        gpu: o.gpu,
        // The decode plans' blocks, then the prompt's.
        numBlocks: 16 + ppBlocks,
        blockSize: BLOCK,
        kvFormat: 'f16',
      });
      const loadS = (performance.now() - t0) / 1000;
      if (o.warmup === 'full') {
        await model.forward(prefillPlan(BLOCK, 0));
        await model.forward(decodePlan(1, 0));
        await model.forward(decodePlan(8, 0));
      } else {
        await model.forward(decodePlan(1, 0));
      }
      o.log(`  110M ${type} on ${model.backend}: loaded in ${loadS.toFixed(1)} s and warmed up`);
      const info = { made_by: how, tensor_types: types, weight_bytes: bytes, load_s: loadS };
      runs.push({
        type,
        model,
        info,
        bytes: bytes + (BLOCK + 2) * kvRow,
        b1: [],
        b8: [],
        pp: [],
        roofline: [],
        bw: [],
      });
    }
    for (let round = 0; round < o.rounds; round++) {
      for (let i = 0; i < runs.length; i++) {
        const r = runs[(round + i) % runs.length] as (typeof runs)[number];
        // The same positions every round: each round rewrites the KV slots of the last.
        const before = await o.stream();
        const secs = await timeSteps(r.model, plans(1));
        const bw = (before + (await o.stream())) / 2;
        r.b1.push(1 / secs);
        r.bw.push(bw);
        r.roofline.push(r.bytes / secs / 1e9 / bw);
        r.b8.push(8 / (await timeSteps(r.model, plans(8))));
        if (pp > 0) r.pp.push(pp / (await timeSteps(r.model, [prefillPlan(pp, 16)])));
      }
      o.log(
        `  110M GGUF on ${o.backend}, round ${round + 1}/${o.rounds}: ${runs.map((r) => `${r.type} ${(r.b1.at(-1) as number).toFixed(2)}`).join(', ')} tok/s at batch 1`,
      );
    }
  } finally {
    for (const r of runs) await r.model.destroy();
  }
  const p = `${o.backend}_gguf`;
  const out: Record<string, unknown> = {
    [`${p}_rounds`]: o.rounds,
    [`${p}_steps`]: { b1: o.steps[1], b8: o.steps[8] },
  };
  for (const r of runs) {
    out[`${p}_110m_${r.type.toLowerCase()}`] = {
      ...r.info,
      decode_bytes_per_step_b1: r.bytes,
      decode_tok_s_b1: median(r.b1),
      decode_tok_s_b1_best: Math.max(...r.b1),
      decode_tok_s_b8: median(r.b8),
      decode_tok_s_b8_best: Math.max(...r.b8),
      // Aggregate tok/s of 8 sequences over one's: what batching pays.
      decode_b8_over_b1: median(r.b8.map((v, i) => v / (r.b1[i] as number))),
      ...(pp > 0
        ? {
            [`prefill_tok_s_pp${pp}`]: median(r.pp),
            [`prefill_tok_s_pp${pp}_best`]: Math.max(...r.pp),
          }
        : {}),
      decode_vs_roofline: median(r.roofline),
      stream_gbps_around_b1: median(r.bw),
      decode_tok_s_b1_rounds: r.b1,
    };
  }
  const f16 = runs.find((r) => r.type === 'F16') as (typeof runs)[number];
  const q4 = runs.find((r) => r.type === 'Q4_K_M') as (typeof runs)[number];
  out[`${p}_q4_k_m_speedup_vs_f16_b1`] = median(q4.b1.map((v, i) => v / (f16.b1[i] as number)));
  out[`${p}_q4_k_m_speedup_vs_f16_b1_best`] = Math.max(...q4.b1) / Math.max(...f16.b1);
  out[`${p}_q4_k_m_bytes_ratio_vs_f16`] = f16.bytes / q4.bytes;
  return out;
}

/**
 * The streaming read a plain TypeScript backend can reach: one thread summing a 64 MiB
 * Float32Array in four lanes (the CPU reference's kernels are such loops), best of 3, GB/s.
 */
export function typedArrayStreamGbps(): number {
  const a = new Float32Array(16 * 1024 * 1024);
  for (let i = 0; i < a.length; i += 1024) a[i] = i;
  let best = 0;
  let sink = 0;
  for (let rep = 0; rep < 4; rep++) {
    const t0 = performance.now();
    let s0 = 0;
    let s1 = 0;
    let s2 = 0;
    let s3 = 0;
    for (let i = 0; i < a.length; i += 4) {
      s0 += a[i] as number;
      s1 += a[i + 1] as number;
      s2 += a[i + 2] as number;
      s3 += a[i + 3] as number;
    }
    const secs = (performance.now() - t0) / 1000;
    sink += s0 + s1 + s2 + s3;
    // The first pass warms the JIT; it is not counted.
    if (rep > 0) best = Math.max(best, a.byteLength / secs / 1e9);
  }
  if (Number.isNaN(sink)) throw new Error('unreachable: the sum keeps the loop alive');
  return best;
}
