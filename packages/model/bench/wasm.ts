// The wasm backend's benchmark: its own streaming read next to a native one, then decode
// (batch 1, 8, 32) and a 512-token prompt for the ~110M Llama (MHA and GQA; F16 and Q8_0-like
// int8 weights with 32-element groups), decode over 512 cached tokens per KV format
// (wasm-kv.ts), and the CPU reference's decode for scale.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { defaultThreadCount } from '../src/backends/wasm/thread-count.js';
import { Op } from '../src/backends/wasm/wasm-program.js';
import { createWasmRuntime } from '../src/backends/wasm/wasm-runtime.js';
import { expectedTensors, type ModelConfig, makeModelConfig } from '../src/config.js';
import { type LoadModelOptions, loadModel } from '../src/model/model.js';
import { benchGguf110m } from './gguf-110m.js';
import { BLOCK, decodePlan, LLAMA_110M, prefillPlan, timeSteps } from './plans.js';
import { syntheticReader } from './synthetic-reader.js';
import { benchWasmKv } from './wasm-kv.js';

const STREAM_BYTES = 256 << 20;

/** Best-of-3 streaming read of 256 MiB by the wasm stream kernel on `threads` threads (GB/s). */
async function wasmStreamMeter(threads: number): Promise<{
  measure: () => number;
  lostWakeups: () => number;
  close: () => Promise<void>;
}> {
  const rt = await createWasmRuntime({ threads, reserveBytes: STREAM_BYTES + (1 << 20) });
  const buf = rt.arena.alloc(STREAM_BYTES);
  rt.arena.u8(buf, STREAM_BYTES).fill(1);
  const out = rt.arena.alloc(1024);
  const p = rt.program(1);
  p.push(Op.stream, [buf, STREAM_BYTES, out]);
  rt.run(p);
  return {
    lostWakeups: () => rt.pool.lostWakeups,
    measure() {
      let best = 0;
      for (let r = 0; r < 3; r++) {
        const t0 = performance.now();
        rt.run(p);
        best = Math.max(best, STREAM_BYTES / ((performance.now() - t0) / 1000) / 1e9);
      }
      return best;
    },
    close: () => rt.close(),
  };
}

/** The same read from native code (bench/stream.c), when clang is installed. */
function cStream(threads: number): number | undefined {
  const dir = mkdtempSync(join(tmpdir(), 'kvasir-stream-'));
  try {
    const src = join(dirname(fileURLToPath(import.meta.url)), 'stream.c');
    const bin = join(dir, 'stream');
    execFileSync('clang', ['-O2', '-pthread', '-o', bin, src], { stdio: 'ignore' });
    return Number(execFileSync(bin, [String(threads), '256'], { encoding: 'utf8' }).trim());
  } catch {
    return undefined;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Bytes of the matrices one decode step reads (the tied embedding counted once, as LM head). */
function weightBytes(c: ModelConfig, bytesPerWeight: number): number {
  let n = 0;
  for (const t of expectedTensors(c))
    if (t.shape.length === 2 && t.name !== 'model.embed_tokens.weight')
      n += (t.shape[0] as number) * (t.shape[1] as number);
  if (c.tieWordEmbeddings) n += c.vocabSize * c.hiddenSize;
  return n * bytesPerWeight;
}

async function benchModel(
  name: string,
  config: ModelConfig,
  weights: 'f16' | 'q8_0',
  threads: number,
  stream: () => number,
  log: (s: string) => void,
): Promise<Record<string, number>> {
  const opts: LoadModelOptions = {
    backend: 'wasm',
    threads,
    numBlocks: 72,
    blockSize: BLOCK,
    kvFormat: 'f16',
    ...(weights === 'f16' ? { weightDtype: 'f16' as const } : { weightQuant: 'int8' as const }),
  };
  const t0 = performance.now();
  const model = await loadModel(syntheticReader(config), opts);
  const r: Record<string, number> = { load_s: (performance.now() - t0) / 1000 };
  await model.forward(prefillPlan(BLOCK, 0));
  // Batch 1 is the roofline figure: stream bandwidth taken just before and just after.
  const bytesPerWeight = weights === 'f16' ? 2 : 1 + 4 / 32;
  const kvRow = config.numLayers * config.numKvHeads * config.headDim * 2 * 2;
  for (const [batch, steps] of [
    [1, 8],
    [8, 3],
    [32, 2],
  ] as const) {
    await model.forward(decodePlan(batch, 0));
    const plans = Array.from({ length: steps }, (_, i) => decodePlan(batch, 1 + i));
    const before = batch === 1 ? stream() : 0;
    const secs = await timeSteps(model, plans);
    r[`decode_tok_s_b${batch}`] = batch / secs;
    if (batch === 1) {
      const bw = (before + stream()) / 2;
      const bytes = weightBytes(config, bytesPerWeight) + (BLOCK + 2) * kvRow;
      r.decode_bytes_per_step_b1 = bytes;
      r.decode_gbps_b1 = bytes / secs / 1e9;
      r.stream_gbps_around_b1 = bw;
      r.decode_vs_roofline = bytes / secs / 1e9 / bw;
    }
    log(`  ${name} ${weights} decode b${batch}: ${(batch / secs).toFixed(2)} tok/s`);
  }
  // The 512-token prompt takes blocks 34..65 (the decode plans used 0..32).
  const pp = await timeSteps(model, [prefillPlan(512, 34)]);
  r.pp512_tok_s = 512 / pp;
  log(`  ${name} ${weights} pp512: ${(512 / pp).toFixed(1)} tok/s`);
  await model.destroy();
  return r;
}

/** Runs the wasm benchmark; `log` gets progress lines. */
export async function benchWasm(log: (s: string) => void): Promise<Record<string, unknown>> {
  const threads = defaultThreadCount();
  const meter = await wasmStreamMeter(threads);
  const single = await wasmStreamMeter(1);
  const out: Record<string, unknown> = { wasm_threads: threads };
  out.wasm_stream_gbps = meter.measure();
  out.wasm_stream_lost_wakeups = meter.lostWakeups();
  out.wasm_stream_gbps_1_thread = single.measure();
  await single.close();
  out.c_stream_gbps = cStream(threads);
  log(
    `wasm stream ${(out.wasm_stream_gbps as number).toFixed(2)} GB/s on ${threads} threads (native: ${out.c_stream_gbps ?? 'n/a'})`,
  );
  const gguf = () =>
    benchGguf110m({
      backend: 'wasm',
      threads,
      stream: meter.measure,
      steps: { 1: 4, 8: 2 },
      prefill: 512,
      rounds: 7,
      warmup: 'full',
      log,
    });
  if (process.argv.includes('--gguf-only')) {
    Object.assign(out, await gguf());
    await meter.close();
    return out;
  }
  const base = LLAMA_110M;
  const configs = {
    mha_110m: makeModelConfig(base),
    gqa_110m_kv4: makeModelConfig({ ...base, numKvHeads: 4 }),
  };
  if (process.argv.includes('--wasm-kv-only')) {
    await meter.close();
    return { ...out, ...(await benchWasmKv(configs, threads, log)) };
  }
  for (const [name, config] of Object.entries(configs)) {
    for (const w of ['f16', 'q8_0'] as const) {
      out[`wasm_${name}_${w}`] = await benchModel(name, config, w, threads, meter.measure, log);
    }
  }
  const main = out.wasm_mha_110m_f16 as Record<string, number>;
  out.wasm_decode_tok_s_b1 = main.decode_tok_s_b1;
  out.wasm_pp512_tok_s = main.pp512_tok_s;
  out.wasm_decode_vs_roofline = main.decode_vs_roofline;
  Object.assign(out, await gguf());
  Object.assign(out, await benchWasmKv(configs, threads, log));
  await meter.close();
  // The TypeScript reference backend, one decode step, for scale.
  const cpu = await loadModel(syntheticReader(configs.mha_110m), {
    backend: 'cpu',
    numBlocks: 4,
    blockSize: BLOCK,
    kvFormat: 'f16',
    weightDtype: 'f16',
  });
  await cpu.forward(prefillPlan(BLOCK, 0));
  out.cpu_reference_decode_tok_s_b1 = 1 / (await timeSteps(cpu, [decodePlan(1, 0)]));
  await cpu.destroy();
  return out;
}
