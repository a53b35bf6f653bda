// GGUF weight types on the wasm backend (issue 19): the ~110M Llama as F16, Q8_0, Q6_K and
// Q4_K_M GGUF files, decode at batch 1 and 8 with the blocks multiplied in place, each against
// the wasm streaming read measured around it. The F16 file is tooling/llama.cpp's
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
import { loadModel, type Model } from '../src/execution/model.js';
import { convertToGguf } from '../src/formats/gguf/convert.js';
import { openGgufCheckpoint } from '../src/formats/gguf/reader.js';
import { writeRandomCheckpoint } from '../src/formats/random-checkpoint.js';
import { BLOCK, decodePlan, prefillPlan, timeSteps } from './plans.js';

const root = join(dirname(fileURLToPath(import.meta.url)), '../../..');
const cache = join(root, '.kvasir-cache');
const quantizeBin = join(root, 'tooling/llama.cpp/build/bin/llama-quantize');

/** The issue-18 comparison model (make-random-gguf.ts: seed 18, MHA). */
export const CONFIG_110M: ModelConfig = makeModelConfig({
  hiddenSize: 768,
  intermediateSize: 2048,
  numLayers: 12,
  numHeads: 12,
  numKvHeads: 12,
  vocabSize: 32000,
  tieWordEmbeddings: true,
  maxPositionEmbeddings: 2048,
});

const TYPES = ['F16', 'Q8_0', 'Q6_K', 'Q4_K_M'] as const;

/** The cached GGUF of `type`, made if missing; `how` says which tool made it. */
async function ggufFile(type: (typeof TYPES)[number]): Promise<{ path: string; how: string }> {
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

/** Decode steps timed per model and round: batch 1, batch 8. */
const STEPS = { 1: 4, 8: 2 } as const;
const ROUNDS = 7;

/**
 * Decode tok/s at batch 1 and 8 for each type, `*_vs_roofline` = (stored weight bytes + KV
 * bytes read per step) × steps/s ÷ the wasm streaming read (`stream`, taken just before and
 * after each model's batch-1 steps), and Q4_K_M's batch-1 speed-up over F16. All four models
 * stay loaded and take turns, `ROUNDS` rounds (the starting model rotating): on a shared
 * machine whose speed drifts, each figure is the median over rounds (`*_best`: the fastest
 * round, what the kernels do when the cores are free), and the speed-up the median of the
 * per-round ratios (and the ratio of the bests).
 */
export async function benchWasmGgml(
  threads: number,
  stream: () => number,
  log: (s: string) => void,
): Promise<Record<string, unknown>> {
  const c = CONFIG_110M;
  const kvRow = c.numLayers * c.numKvHeads * c.headDim * 2 * 2;
  const runs: {
    type: string;
    model: Model;
    info: Record<string, unknown>;
    bytes: number;
    b1: number[];
    b8: number[];
    roofline: number[];
  }[] = [];
  try {
    for (const type of TYPES) {
      const { path, how } = await ggufFile(type);
      const { bytes, types } = await stepWeightBytes(path);
      const model = await loadModel(path, {
        backend: 'wasm',
        threads,
        numBlocks: 16,
        blockSize: BLOCK,
        kvFormat: 'f16',
      });
      await model.forward(prefillPlan(BLOCK, 0));
      await model.forward(decodePlan(1, 0));
      await model.forward(decodePlan(8, 0));
      const info = { made_by: how, tensor_types: types, weight_bytes: bytes };
      runs.push({
        type,
        model,
        info,
        bytes: bytes + (BLOCK + 2) * kvRow,
        b1: [],
        b8: [],
        roofline: [],
      });
    }
    for (let round = 0; round < ROUNDS; round++) {
      for (let i = 0; i < runs.length; i++) {
        const r = runs[(round + i) % runs.length] as (typeof runs)[number];
        // The same positions every round: each round rewrites the KV slots of the last.
        const plans = (batch: 1 | 8) =>
          Array.from({ length: STEPS[batch] }, (_, s) => decodePlan(batch, 1 + s));
        const before = stream();
        const secs = await timeSteps(r.model, plans(1));
        const bw = (before + stream()) / 2;
        r.b1.push(1 / secs);
        r.roofline.push(r.bytes / secs / 1e9 / bw);
        r.b8.push(8 / (await timeSteps(r.model, plans(8))));
      }
      log(
        `  110M GGUF round ${round + 1}/${ROUNDS}: ${runs.map((r) => `${r.type} ${(r.b1.at(-1) as number).toFixed(2)}`).join(', ')} tok/s at batch 1`,
      );
    }
  } finally {
    for (const r of runs) await r.model.destroy();
  }
  const out: Record<string, unknown> = { wasm_gguf_rounds: ROUNDS };
  for (const r of runs) {
    out[`wasm_gguf_110m_${r.type.toLowerCase()}`] = {
      ...r.info,
      decode_bytes_per_step_b1: r.bytes,
      decode_tok_s_b1: median(r.b1),
      decode_tok_s_b1_best: Math.max(...r.b1),
      decode_tok_s_b8: median(r.b8),
      decode_tok_s_b8_best: Math.max(...r.b8),
      decode_vs_roofline: median(r.roofline),
      decode_tok_s_b1_rounds: r.b1,
    };
  }
  const f16 = runs.find((r) => r.type === 'F16') as (typeof runs)[number];
  const q4 = runs.find((r) => r.type === 'Q4_K_M') as (typeof runs)[number];
  out.wasm_gguf_q4_k_m_speedup_vs_f16_b1 = median(q4.b1.map((v, i) => v / (f16.b1[i] as number)));
  out.wasm_gguf_q4_k_m_speedup_vs_f16_b1_best = Math.max(...q4.b1) / Math.max(...f16.b1);
  out.wasm_gguf_q4_k_m_bytes_ratio_vs_f16 = f16.bytes / q4.bytes;
  return out;
}
