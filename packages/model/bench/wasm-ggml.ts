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
import type { ForwardPlan } from '../src/execution/forward-plan.js';
import { loadModel, type Model } from '../src/execution/model.js';
import { convertToGguf } from '../src/formats/gguf/convert.js';
import { openGgufCheckpoint } from '../src/formats/gguf/reader.js';
import { writeRandomCheckpoint } from '../src/formats/random-checkpoint.js';

const BLOCK = 16;
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

function decodePlan(batch: number, step: number): ForwardPlan {
  const pos = BLOCK + step;
  return {
    tokenIds: Int32Array.from({ length: batch }, (_, s) => (s * 31 + step) % 1000),
    positions: new Int32Array(batch).fill(pos),
    slotMapping: Int32Array.from({ length: batch }, (_, s) => (1 + s) * BLOCK + step),
    rows: Array.from({ length: batch }, (_, s) => ({
      queryStart: s,
      queryLen: 1,
      contextLen: pos + 1,
      blockTable: [0, 1 + s],
    })),
    logitsIndices: Int32Array.from({ length: batch }, (_, s) => s),
  };
}

function promptPlan(): ForwardPlan {
  return {
    tokenIds: Int32Array.from({ length: BLOCK }, (_, i) => (i * 7) % 1000),
    positions: Int32Array.from({ length: BLOCK }, (_, i) => i),
    slotMapping: Int32Array.from({ length: BLOCK }, (_, i) => i),
    rows: [{ queryStart: 0, queryLen: BLOCK, contextLen: BLOCK, blockTable: [0] }],
    logitsIndices: Int32Array.of(BLOCK - 1),
  };
}

async function timeSteps(model: Model, plans: ForwardPlan[]): Promise<number> {
  const t0 = performance.now();
  for (const p of plans) await model.forward(p);
  return (performance.now() - t0) / 1000 / plans.length;
}

/**
 * Decode tok/s at batch 1 and 8 for each type, `*_vs_roofline` = (stored weight bytes + KV
 * bytes read per step) × steps/s ÷ the wasm streaming read (`stream`, taken just before and
 * after the batch-1 steps), and Q4_K_M's batch-1 speed-up over F16.
 */
export async function benchWasmGgml(
  threads: number,
  stream: () => number,
  log: (s: string) => void,
): Promise<Record<string, unknown>> {
  const out: Record<string, unknown> = {};
  const c = CONFIG_110M;
  const kvRow = c.numLayers * c.numKvHeads * c.headDim * 2 * 2;
  for (const type of TYPES) {
    const { path, how } = await ggufFile(type);
    const { bytes: weightBytes, types } = await stepWeightBytes(path);
    const model = await loadModel(path, {
      backend: 'wasm',
      threads,
      numBlocks: 16,
      blockSize: BLOCK,
      kvFormat: 'f16',
    });
    const r: Record<string, unknown> = {
      made_by: how,
      tensor_types: types,
      weight_bytes: weightBytes,
    };
    await model.forward(promptPlan());
    for (const [batch, steps] of [
      [1, 8],
      [8, 3],
    ] as const) {
      await model.forward(decodePlan(batch, 0));
      const plans = Array.from({ length: steps }, (_, i) => decodePlan(batch, 1 + i));
      const before = batch === 1 ? stream() : 0;
      const secs = await timeSteps(model, plans);
      r[`decode_tok_s_b${batch}`] = batch / secs;
      if (batch === 1) {
        const bw = (before + stream()) / 2;
        const bytes = weightBytes + (BLOCK + 2) * kvRow;
        r.decode_bytes_per_step_b1 = bytes;
        r.stream_gbps_around_b1 = bw;
        r.decode_vs_roofline = bytes / secs / 1e9 / bw;
      }
      log(`  110M ${type} decode b${batch}: ${(batch / secs).toFixed(2)} tok/s`);
    }
    await model.destroy();
    out[`wasm_gguf_110m_${type.toLowerCase()}`] = r;
  }
  const b1 = (t: string) =>
    (out[`wasm_gguf_110m_${t}`] as Record<string, number>).decode_tok_s_b1 as number;
  out.wasm_gguf_q4_k_m_speedup_vs_f16_b1 = b1('q4_k_m') / b1('f16');
  return out;
}
