// A model split by layer: what the pipeline's hops cost. `shard_overhead`: the ~110M Llama
// (f16 weights from a synthetic checkpoint) on two wasm memories (layers 0-5 and 6-11) ÷ the
// same model on one, for decode and prefill at batch 1 and 8, the two models loaded side by
// side and timed in alternation (A B A B ...), best of each. Then `--gpu-layers` on the WebGPU
// adapter present (the software one here): decode at 0, 25, 50, 75 and 100% of the layers on
// WebGPU, the rest on wasm; the software adapter is slower than wasm, so this measures the
// machinery, not a speed-up.
//   pnpm exec tsx bench/shard.ts [--json] [--threads N] [--rounds R] [--no-gpu | --gpu-only]
import { loadavg } from 'node:os';
import { createGpu } from '@kvasir/gpu';
import { makeModelConfig } from '../src/config.js';
import type { ForwardPlan } from '../src/execution/forward-plan.js';
import { type LoadModelOptions, loadModel, type Model } from '../src/model/model.js';
import { gpuLayersPlacement } from '../src/model/placement.js';
import { BLOCK, LLAMA_110M, timeSteps } from './plans.js';
import { syntheticReader } from './synthetic-reader.js';

const args = process.argv.slice(2);
const json = args.includes('--json');
const flag = (name: string, fallback: number) => {
  const i = args.indexOf(name);
  return i >= 0 ? Number(args[i + 1]) : fallback;
};
const threads = flag('--threads', 2);
const rounds = flag('--rounds', 3);
// Progress and figures go to stderr as they come (a sweep on a software adapter is slow);
// `--json` prints the whole result on stdout at the end.
const log = (s: string) => console.error(s);

const config = makeModelConfig({ ...LLAMA_110M, numKvHeads: 12 });
const PROMPT = 64;
const DECODE_STEPS = 4;

/** `batch` sequences of `len` tokens each, sequence s on its own blocks from `s * perSeq`. */
function prefill(batch: number, len: number, perSeq: number): ForwardPlan {
  const n = batch * len;
  const slot = (s: number, i: number) => (s * perSeq + Math.floor(i / BLOCK)) * BLOCK + (i % BLOCK);
  return {
    tokenIds: Int32Array.from({ length: n }, (_, i) => (i * 7) % 1000),
    positions: Int32Array.from({ length: n }, (_, i) => i % len),
    slotMapping: Int32Array.from({ length: n }, (_, i) => slot(Math.floor(i / len), i % len)),
    rows: Array.from({ length: batch }, (_, s) => ({
      queryStart: s * len,
      queryLen: len,
      contextLen: len,
      blockTable: Array.from({ length: perSeq }, (_, b) => s * perSeq + b),
    })),
    logitsIndices: Int32Array.from({ length: batch }, (_, s) => s * len + len - 1),
  };
}

/** One decode step of `batch` sequences after their `PROMPT`-token prompts. */
function decode(batch: number, step: number, perSeq: number): ForwardPlan {
  const pos = PROMPT + step;
  return {
    tokenIds: Int32Array.from({ length: batch }, (_, s) => (s * 31 + step) % 1000),
    positions: new Int32Array(batch).fill(pos),
    slotMapping: Int32Array.from(
      { length: batch },
      (_, s) => (s * perSeq + Math.floor(pos / BLOCK)) * BLOCK + (pos % BLOCK),
    ),
    rows: Array.from({ length: batch }, (_, s) => ({
      queryStart: s,
      queryLen: 1,
      contextLen: pos + 1,
      blockTable: Array.from({ length: perSeq }, (_, b) => s * perSeq + b),
    })),
    logitsIndices: Int32Array.from({ length: batch }, (_, s) => s),
  };
}

const PER_SEQ = Math.ceil((PROMPT + DECODE_STEPS + 1) / BLOCK);
const BASE: LoadModelOptions = {
  numBlocks: 8 * PER_SEQ,
  blockSize: BLOCK,
  kvFormat: 'f16',
  weightDtype: 'f16',
};

/** Seconds of one prefill of `batch` prompts, then per decode step of the batch. */
async function measure(model: Model, batch: number): Promise<{ prefill: number; decode: number }> {
  const prefillS = await timeSteps(model, [prefill(batch, PROMPT, PER_SEQ)]);
  const steps = Array.from({ length: DECODE_STEPS }, (_, s) => decode(batch, s, PER_SEQ));
  const decodeS = await timeSteps(model, steps);
  return { prefill: prefillS, decode: decodeS };
}

async function shardOverhead() {
  const whole = await loadModel(syntheticReader(config), { ...BASE, backend: 'wasm', threads });
  const half = config.numLayers / 2;
  const split = await loadModel(syntheticReader(config), {
    ...BASE,
    devices: [
      { backend: 'wasm', threads, layers: { firstLayer: 0, numLayers: half } },
      { backend: 'wasm', threads },
    ],
  });
  const out: Record<string, number | string> = {};
  try {
    for (const batch of [1, 8]) {
      // Warm both (first-step allocations), then alternate.
      await measure(whole, batch);
      await measure(split, batch);
      const best = {
        whole: { prefill: Infinity, decode: Infinity },
        split: { prefill: Infinity, decode: Infinity },
      };
      for (let r = 0; r < rounds; r++) {
        // Each goes first in every other round: on a loaded machine the order itself shows.
        const pair = [
          ['whole', whole],
          ['split', split],
        ] as const;
        for (const [name, m] of r % 2 === 0 ? pair : [...pair].reverse()) {
          const t = await measure(m, batch);
          best[name].prefill = Math.min(best[name].prefill, t.prefill);
          best[name].decode = Math.min(best[name].decode, t.decode);
        }
      }
      for (const phase of ['decode', 'prefill'] as const) {
        const key = `shard_overhead_${phase}_b${batch}`;
        out[key] = Number((best.split[phase] / best.whole[phase]).toFixed(3));
        out[`${key}_whole_ms`] = Number((best.whole[phase] * 1000).toFixed(1));
        out[`${key}_split_ms`] = Number((best.split[phase] * 1000).toFixed(1));
        log(
          `${key}: ${out[key]} (one memory ${out[`${key}_whole_ms`]} ms, two ${out[`${key}_split_ms`]} ms${phase === 'prefill' ? `, ${batch}×${PROMPT} tokens` : ' per step'})`,
        );
      }
    }
  } finally {
    await whole.destroy();
    await split.destroy();
  }
  return out;
}

async function gpuLayersSweep() {
  let gpu: Awaited<ReturnType<typeof createGpu>>;
  try {
    gpu = await createGpu({ label: 'kvasir-shard-bench' });
  } catch (e) {
    log(`no WebGPU adapter: ${(e as Error).message}`);
    return {};
  }
  const out: Record<string, number | string> = { gpu_layers_adapter: gpu.describe() };
  try {
    for (const pct of [0, 25, 50, 75, 100]) {
      const n = Math.round((config.numLayers * pct) / 100);
      const devices = gpuLayersPlacement(n, config.numLayers).map((d) =>
        d.backend === 'webgpu' ? { ...d, gpu } : { ...d, threads },
      );
      const model = await loadModel(syntheticReader(config), { ...BASE, devices });
      try {
        await measure(model, 1);
        let best = Infinity;
        for (let r = 0; r < Math.max(1, rounds - 1); r++)
          best = Math.min(best, (await measure(model, 1)).decode);
        out[`gpu_layers_${pct}pct_decode_tok_s`] = Number((1 / best).toFixed(2));
        log(`--gpu-layers ${n} (${pct}%): ${(1 / best).toFixed(2)} tokens/s decode at batch 1`);
      } finally {
        await model.destroy();
      }
    }
  } finally {
    gpu.destroy();
  }
  return out;
}

const load0 = loadavg()
  .map((x) => x.toFixed(2))
  .join(' ');
const result: Record<string, number | string> = {
  config: '110M (hidden 768, 12 layers, 12 heads, f16 weights), f16 KV',
  threads,
  rounds,
  ...(args.includes('--gpu-only') ? {} : await shardOverhead()),
};
if (!args.includes('--no-gpu')) Object.assign(result, await gpuLayersSweep());
result.loadavg = `${load0} -> ${loadavg()
  .map((x) => x.toFixed(2))
  .join(' ')}`;
if (json) console.log(JSON.stringify(result, null, 2));
log(`load average ${result.loadavg}`);
