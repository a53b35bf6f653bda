// The wasm backend's decode over a long cached context, per KV format: where the KV cache's
// bytes, not the weights', decide the step time. Each sequence holds CONTEXT tokens of its own
// (filled with writeBlocks, so no prefill is timed or needed), and decodes at batch 1, 8, 32.
// The formats' models are loaded side by side and timed in alternation, ROUNDS times, keeping
// each one's best: on a shared machine whose speed drifts, that compares them in one window.
// Then KV compression's key shifts: the kernel against the TypeScript reference it replaced.
import { ropeTables, shiftKeysReference } from '@kvasir/attention-kernels';
import { KvCode, Op } from '../src/backends/wasm/wasm-program.js';
import { createWasmRuntime } from '../src/backends/wasm/wasm-runtime.js';
import { type ModelConfig, ropeConfig } from '../src/config.js';
import type { ForwardPlan } from '../src/execution/forward-plan.js';
import { type KvFormatName, kvCacheSpec } from '../src/execution/kv-cache.js';
import { loadModel, type Model } from '../src/model/model.js';
import { syntheticReader } from './synthetic-reader.js';

const BLOCK = 16;
/** Cached tokens per sequence before the timed steps. */
const CONTEXT = 512;
const CONTEXT_BLOCKS = CONTEXT / BLOCK;
/** Blocks per sequence: its context and two for the tokens decoded after it. */
const SEQ_BLOCKS = CONTEXT_BLOCKS + 2;
const BATCHES = [
  [1, 8],
  [8, 3],
  [32, 2],
] as const;
const MAX_BATCH = 32;
const FORMATS: readonly KvFormatName[] = ['f16', 'int8'];
const ROUNDS = 2;

/** One block of every layer with rows of a seeded ±1 uniform K and V, in `format`. */
function blockBytes(config: ModelConfig, format: KvFormatName): Uint8Array {
  const kv = kvCacheSpec(config, { kvFormat: format, blockSize: BLOCK, numBlocks: 1 });
  const words = new Uint32Array(kv.numLayers * kv.blockWords);
  const row = new Float32Array(kv.headDim);
  let s = 12345;
  for (let l = 0; l < kv.numLayers; l++) {
    const layer = words.subarray(l * kv.blockWords, (l + 1) * kv.blockWords);
    for (let slab = 0; slab < 2 * kv.numKvHeads; slab++) {
      for (let t = 0; t < BLOCK; t++) {
        for (let e = 0; e < kv.headDim; e++) {
          s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
          row[e] = (s / 2 ** 32 - 0.5) * 2;
        }
        kv.kvFormat.encodeRow(layer, slab * kv.slabWords, t, row, BLOCK);
      }
    }
  }
  return new Uint8Array(words.buffer);
}

/** `batch` sequences, sequence s on blocks [s * SEQ_BLOCKS, (s + 1) * SEQ_BLOCKS). */
function decodePlan(batch: number, step: number): ForwardPlan {
  const pos = CONTEXT + step;
  const table = (s: number) => Array.from({ length: SEQ_BLOCKS }, (_, b) => s * SEQ_BLOCKS + b);
  return {
    tokenIds: Int32Array.from({ length: batch }, (_, s) => (s * 31 + step) % 1000),
    positions: new Int32Array(batch).fill(pos),
    slotMapping: Int32Array.from({ length: batch }, (_, s) => s * SEQ_BLOCKS * BLOCK + pos),
    rows: Array.from({ length: batch }, (_, s) => ({
      queryStart: s,
      queryLen: 1,
      contextLen: pos + 1,
      blockTable: table(s),
    })),
    logitsIndices: Int32Array.from({ length: batch }, (_, s) => s),
  };
}

/** Tokens/s of `steps` decode steps at `batch`, from decode step `first` on. */
async function decodeRate(model: Model, batch: number, steps: number, first: number) {
  const t0 = performance.now();
  for (let i = 0; i < steps; i++) await model.forward(decodePlan(batch, first + i));
  return (batch * steps) / ((performance.now() - t0) / 1000);
}

/** Blocks one key-shift timing moves (a 1,024-token window of 16-token blocks, less one). */
const SHIFT_BLOCKS = 63;

/**
 * Milliseconds to re-rotate the keys of SHIFT_BLOCKS blocks on every layer (KV compression's key
 * shifts after a drop): the wasm kernel on `threads` threads, and the TypeScript reference
 * (attention-kernels' shiftKeysReference, which wrote the same bytes) it replaced.
 */
async function keyShiftMs(config: ModelConfig, format: KvFormatName, threads: number) {
  const kv = kvCacheSpec(config, { kvFormat: format, blockSize: BLOCK, numBlocks: 64 });
  const rope = ropeConfig(config, 2048);
  const tables = ropeTables(rope);
  const one = new Uint32Array(blockBytes(config, format).buffer);
  const layer = new Uint32Array(kv.layerWords);
  for (let b = 0; b < kv.numBlocks; b++)
    layer.set(one.subarray(0, kv.blockWords), b * kv.blockWords);
  const shifts = Array.from({ length: SHIFT_BLOCKS }, (_, i) => ({ block: i + 1, delta: -BLOCK }));
  const rt = await createWasmRuntime({
    threads,
    reserveBytes: kv.numLayers * kv.layerWords * 4 + (8 << 20),
  });
  const put = (x: Int32Array | Float32Array | Uint32Array) => {
    const p = rt.arena.alloc(x.length * 4);
    rt.arena.u32(p, x.length).set(new Uint32Array(x.buffer, x.byteOffset, x.length));
    return p;
  };
  const caches = Array.from({ length: kv.numLayers }, () => put(layer));
  const p = rt.program(1);
  p.push(Op.keyShift, [
    put(Int32Array.from(caches)),
    kv.numLayers,
    put(Int32Array.from(shifts.flatMap((k) => [k.block, k.delta]))),
    shifts.length,
    kv.numKvHeads,
    kv.headDim,
    KvCode[format],
    BLOCK,
    kv.blockWords,
    kv.slabWords,
    put(tables.cos),
    put(tables.sin),
  ]);
  rt.run(p);
  const reps = 3;
  let t0 = performance.now();
  for (let r = 0; r < reps; r++) rt.run(p);
  const wasm = (performance.now() - t0) / reps;
  await rt.close();
  const host = Array.from({ length: kv.numLayers }, () => layer.slice());
  const config2 = { ...kv, format: kv.kvFormat, rope };
  t0 = performance.now();
  for (const cache of host) shiftKeysReference(config2, tables, cache, shifts);
  return { wasm, reference: performance.now() - t0 };
}

/**
 * Decode tokens/s at batch 1, 8 and 32 with CONTEXT cached tokens per sequence, f16 weights,
 * for each config and KV format (f16, int8), with the KV bytes one step reads per sequence,
 * and the milliseconds of a SHIFT_BLOCKS-block key shift in wasm and in the reference.
 */
export async function benchWasmKv(
  configs: Record<string, ModelConfig>,
  threads: number,
  log: (s: string) => void,
): Promise<Record<string, unknown>> {
  const out: Record<string, unknown> = { wasm_kv_context_tokens: CONTEXT, wasm_kv_rounds: ROUNDS };
  for (const [name, config] of Object.entries(configs)) {
    const models: Model[] = [];
    const results: Record<string, number>[] = [];
    for (const format of FORMATS) {
      const model = await loadModel(syntheticReader(config), {
        backend: 'wasm',
        threads,
        numBlocks: MAX_BATCH * SEQ_BLOCKS,
        blockSize: BLOCK,
        kvFormat: format,
        weightDtype: 'f16',
      });
      const one = blockBytes(config, format);
      const ids = Array.from({ length: MAX_BATCH * SEQ_BLOCKS }, (_, i) => i);
      const all = new Uint8Array(ids.length * one.length);
      for (let i = 0; i < ids.length; i++) all.set(one, i * one.length);
      await model.writeBlocks(ids, all);
      models.push(model);
      results.push({ kv_bytes_read_per_seq_step: (CONTEXT + 1) * (one.length / BLOCK) });
    }
    // Every batch size decodes from position CONTEXT again (at most 2 * BLOCK steps).
    for (const [batch, steps] of BATCHES) {
      for (const m of models) await m.forward(decodePlan(batch, 0));
      let step = 1;
      for (let round = 0; round < ROUNDS; round++) {
        for (const [i, m] of models.entries()) {
          const r = results[i] as Record<string, number>;
          const key = `decode_tok_s_b${batch}`;
          r[key] = Math.max(r[key] ?? 0, await decodeRate(m, batch, steps, step));
        }
        step += steps;
      }
    }
    for (const [i, format] of FORMATS.entries()) {
      const r = results[i] as Record<string, number>;
      out[`wasm_kv_${name}_${format}`] = r;
      log(
        `  ${name} KV ${format}, ${CONTEXT} cached tokens: decode ${BATCHES.map(([b]) => `b${b} ${(r[`decode_tok_s_b${b}`] as number).toFixed(2)}`).join(', ')} tok/s`,
      );
      await (models[i] as Model).destroy();
    }
    for (const format of FORMATS) {
      const ms = await keyShiftMs(config, format, threads);
      out[`wasm_kv_${name}_${format}_key_shift_ms`] = ms.wasm;
      out[`reference_kv_${name}_${format}_key_shift_ms`] = ms.reference;
      log(
        `  ${name} KV ${format}: key shift of ${SHIFT_BLOCKS} blocks x ${config.numLayers} layers ${ms.wasm.toFixed(1)} ms (TypeScript reference ${ms.reference.toFixed(0)} ms)`,
      );
    }
    const f16 = out[`wasm_kv_${name}_f16`] as Record<string, number>;
    const int8 = out[`wasm_kv_${name}_int8`] as Record<string, number>;
    for (const [b] of BATCHES) {
      out[`wasm_kv_${name}_int8_vs_f16_b${b}`] =
        (int8[`decode_tok_s_b${b}`] as number) / (f16[`decode_tok_s_b${b}`] as number);
    }
  }
  return out;
}
