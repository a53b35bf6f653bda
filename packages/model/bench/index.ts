// Decode/prefill benchmark of the forward pass on the adapter present (llvmpipe in CI).
// `pnpm --filter @kvasir/model bench --json` prints one JSON object.
import { BufferUsage, createGpu, type Gpu } from '@kvasir/gpu';
import { expectedTensors, type ModelConfig, makeModelConfig } from '../src/config.js';
import type { ForwardPlan } from '../src/execution/forward-plan.js';
import { loadModel, type Model } from '../src/model/model.js';
import { benchGguf110m, typedArrayStreamGbps } from './gguf-110m.js';
import { LLAMA_110M } from './plans.js';
import { syntheticReader } from './synthetic-reader.js';
import { benchWasm } from './wasm.js';

const json = process.argv.includes('--json');
const log = (s: string) => {
  if (!json) console.log(s);
};

/**
 * Streaming-read bandwidth of the adapter: a vec4 sum over a 64 MiB buffer. Returns a
 * measuring function, so the bandwidth can be taken right next to each timed decode (the
 * machines here are shared and their speed drifts within a run).
 */
async function bandwidthMeter(gpu: Gpu): Promise<() => Promise<number>> {
  const dev = gpu.device;
  const bytes = 64 * 1024 * 1024;
  const src = dev.createBuffer({ size: bytes, usage: BufferUsage.STORAGE });
  const out = dev.createBuffer({ size: 4096 * 4, usage: BufferUsage.STORAGE });
  // Each workgroup streams one contiguous chunk, its invocations reading neighbouring vec4s:
  // the pattern the matvec kernels use (and the one a CPU-backed adapter can prefetch).
  const groups = 256;
  const perGroup = bytes / 16 / groups;
  const code = /* wgsl */ `
@group(0) @binding(0) var<storage, read> src: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  var acc = vec4<f32>(0.0);
  let base = wg.x * ${perGroup}u;
  for (var i = lid; i < ${perGroup}u; i += 64u) { acc += src[base + i]; }
  out[(wg.x * 64u + lid) % 4096u] = acc.x + acc.y + acc.z + acc.w;
}`;
  const pipe = dev.createComputePipeline({
    layout: 'auto',
    compute: { module: dev.createShaderModule({ code }), entryPoint: 'main' },
  });
  const bg = dev.createBindGroup({
    layout: pipe.getBindGroupLayout(0),
    entries: [
      { binding: 0, resource: { buffer: src } },
      { binding: 1, resource: { buffer: out } },
    ],
  });
  const run = async (reps: number) => {
    const enc = dev.createCommandEncoder();
    const pass = enc.beginComputePass();
    pass.setPipeline(pipe);
    pass.setBindGroup(0, bg);
    for (let r = 0; r < reps; r++) pass.dispatchWorkgroups(groups);
    pass.end();
    dev.queue.submit([enc.finish()]);
    await dev.queue.onSubmittedWorkDone();
  };
  await run(1);
  return async () => {
    const reps = 4;
    const t0 = performance.now();
    await run(reps);
    return (bytes * reps) / ((performance.now() - t0) / 1000);
  };
}

function decodePlan(
  batch: number,
  prefixLen: number,
  blockSize: number,
  step: number,
): ForwardPlan {
  // Every sequence shares the prefilled prefix block(s) and owns block (1 + s) for its own tokens.
  const prefixBlocks = Math.ceil(prefixLen / blockSize);
  const pos = prefixLen + step;
  return {
    tokenIds: Int32Array.from({ length: batch }, (_, s) => (s * 31 + step) % 1000),
    positions: new Int32Array(batch).fill(pos),
    slotMapping: Int32Array.from(
      { length: batch },
      (_, s) => (prefixBlocks + s) * blockSize + step,
    ),
    rows: Array.from({ length: batch }, (_, s) => ({
      queryStart: s,
      queryLen: 1,
      contextLen: pos + 1,
      blockTable: [...Array.from({ length: prefixBlocks }, (_, b) => b), prefixBlocks + s],
    })),
    logitsIndices: Int32Array.from({ length: batch }, (_, s) => s),
  };
}

async function timeSteps(model: Model, plans: ForwardPlan[]): Promise<number> {
  const t0 = performance.now();
  for (const p of plans) await model.forward(p);
  return (performance.now() - t0) / 1000 / plans.length;
}

async function benchConfig(
  name: string,
  config: ModelConfig,
  gpu: Gpu,
  bandwidth: () => Promise<number>,
) {
  const blockSize = 16;
  const prefixLen = 16;
  const numBlocks = 1 + 32 + 1;
  const t0 = performance.now();
  const model = await loadModel(syntheticReader(config), {
    gpu,
    numBlocks,
    blockSize,
    kvFormat: 'f16',
  });
  const loadSecs = (performance.now() - t0) / 1000;
  log(`${name}: loaded in ${loadSecs.toFixed(1)} s on ${model.backend}`);
  // Prefill: warm up (pipeline compilation), then time one 128-token prompt (blocks 1..8).
  const prefill = (len: number, blocks: number[]): ForwardPlan => ({
    tokenIds: Int32Array.from({ length: len }, (_, i) => (i * 7) % 1000),
    positions: Int32Array.from({ length: len }, (_, i) => i),
    slotMapping: Int32Array.from(
      { length: len },
      (_, i) => (blocks[Math.floor(i / blockSize)] as number) * blockSize + (i % blockSize),
    ),
    rows: [{ queryStart: 0, queryLen: len, contextLen: len, blockTable: blocks }],
    logitsIndices: Int32Array.of(len - 1),
  });
  // The 16-token prefix compiles the prefill pipelines; then one 64-token prompt is timed.
  await model.forward(prefill(prefixLen, [0]));
  const prefillLen = 64;
  const pBlocks = Array.from({ length: prefillLen / blockSize }, (_, i) => 1 + i);
  const prefillSecs = await timeSteps(model, [prefill(prefillLen, pBlocks)]);

  const weightBytes = bytesOfWeights(config);
  const kvRowBytes = config.numLayers * config.numKvHeads * config.headDim * 2 * 2; // K+V, f16
  const result: Record<string, number> = {};
  const tps: Record<number, number> = {};
  for (const [batch, steps] of [
    [1, 2],
    [8, 1],
    [32, 1],
  ] as const) {
    await model.forward(decodePlan(batch, prefixLen, blockSize, 0));
    const plans = Array.from({ length: steps }, (_, i) =>
      decodePlan(batch, prefixLen, blockSize, 1 + i),
    );
    const bwBefore = batch === 1 ? await bandwidth() : 0;
    const secs = await timeSteps(model, plans);
    tps[batch] = batch / secs;
    result[`decode_tok_s_b${batch}`] = batch / secs;
    if (batch === 1) {
      const kvBytes = (prefixLen + 2) * kvRowBytes;
      result.decode_bytes_per_step_b1 = weightBytes + kvBytes;
      result.decode_achieved_bytes_s_b1 = (weightBytes + kvBytes) / secs;
      // The adapter's bandwidth bracketing the timed steps (mean of just before and just after).
      const bw = (bwBefore + (await bandwidth())) / 2;
      result.adapter_read_bytes_s = bw;
      result.decode_vs_roofline = (weightBytes + kvBytes) / secs / bw;
    }
    log(
      `  decode batch ${batch}: ${(batch / secs).toFixed(2)} tok/s (${(secs * 1000).toFixed(0)} ms/step)`,
    );
  }
  result.batch32_vs_batch1 = (tps[32] as number) / (tps[1] as number);
  result.prefill_tok_s = prefillLen / prefillSecs;
  result.load_s = loadSecs;
  log(
    `  prefill: ${(prefillLen / prefillSecs).toFixed(1)} tok/s; roofline ${result.decode_vs_roofline?.toFixed(3)}`,
  );
  await model.destroy();
  return result;
}

/** Bytes of the matrices a decode step streams (f16 storage), embeddings counted once (tied). */
function bytesOfWeights(c: ModelConfig): number {
  let n = 0;
  for (const t of expectedTensors(c))
    if (t.shape.length === 2 && t.name !== 'model.embed_tokens.weight')
      n += t.shape[0]! * t.shape[1]!;
  // Tied: the embedding matrix is the LM head, read whole once per step; the gather reads B rows.
  if (c.tieWordEmbeddings) n += c.vocabSize * c.hiddenSize;
  return n * 2;
}

const base = LLAMA_110M;
// `--gguf-only`: just the 110M GGUF weight-type rows, on the wasm, WebGPU and CPU backends.
const ggufOnly = process.argv.includes('--gguf-only');
const wasm = await benchWasm(log);
if (process.argv.includes('--wasm-only') || process.argv.includes('--wasm-kv-only')) {
  console.log(JSON.stringify(wasm, null, json ? undefined : 2));
  process.exit(0);
}
const gpu = await createGpu();
const bandwidth = await bandwidthMeter(gpu);
log(`adapter: ${gpu.describe()}`);
const dense = ggufOnly
  ? {}
  : {
      mha_110m: await benchConfig('110M MHA', makeModelConfig(base), gpu, bandwidth),
      gqa_110m_kv4: await benchConfig(
        '110M GQA (4 kv heads)',
        makeModelConfig({ ...base, numKvHeads: 4 }),
        gpu,
        bandwidth,
      ),
    };
// The GGUF weight-type rows on WebGPU: few steps, as a software adapter takes seconds per step.
const webgpuGguf = await benchGguf110m({
  backend: 'webgpu',
  gpu,
  stream: async () => (await bandwidth()) / 1e9,
  steps: { 1: 2, 8: 1 },
  rounds: 2,
  warmup: 'full',
  log,
});
gpu.destroy();
// And on the TypeScript reference: one step of each batch, against a typed-array read.
const cpuStream = typedArrayStreamGbps();
const cpuGguf = await benchGguf110m({
  backend: 'cpu',
  stream: () => cpuStream,
  steps: { 1: 1, 8: 1 },
  rounds: 1,
  warmup: 'decode-b1',
  log,
});
const out = {
  ...wasm,
  adapter: gpu.adapterInfo.description || gpu.adapterInfo.device,
  ...dense,
  decode_vs_roofline: dense.mha_110m?.decode_vs_roofline,
  batch32_vs_batch1: dense.mha_110m?.batch32_vs_batch1,
  ...webgpuGguf,
  cpu_stream_gbps: cpuStream,
  ...cpuGguf,
};
if (json) console.log(JSON.stringify(out));
else console.log(JSON.stringify(out, null, 2));
