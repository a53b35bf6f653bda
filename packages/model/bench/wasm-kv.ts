// The wasm backend's decode over a long cached context, per KV format: where the KV cache's
// bytes, not the weights', decide the step time. Each sequence holds CONTEXT tokens of its own
// (filled with writeBlocks, so no prefill is timed or needed), and decodes at batch 1, 8, 32.
import type { ModelConfig } from '../src/config.js';
import type { ForwardPlan } from '../src/execution/forward-plan.js';
import { type KvFormatName, kvCacheSpec } from '../src/execution/kv-cache.js';
import { loadModel, type Model } from '../src/execution/model.js';
import { syntheticReader } from './synthetic-reader.js';

const BLOCK = 16;
/** Cached tokens per sequence before the timed steps. */
const CONTEXT = 512;
const CONTEXT_BLOCKS = CONTEXT / BLOCK;
/** Blocks per sequence: its context and the block its new tokens go to. */
const SEQ_BLOCKS = CONTEXT_BLOCKS + 1;
const BATCHES = [
  [1, 4],
  [8, 2],
  [32, 1],
] as const;
const MAX_BATCH = 32;
const FORMATS: readonly KvFormatName[] = ['f16', 'int8'];

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
    slotMapping: Int32Array.from(
      { length: batch },
      (_, s) => (s * SEQ_BLOCKS + CONTEXT_BLOCKS) * BLOCK + step,
    ),
    rows: Array.from({ length: batch }, (_, s) => ({
      queryStart: s,
      queryLen: 1,
      contextLen: pos + 1,
      blockTable: table(s),
    })),
    logitsIndices: Int32Array.from({ length: batch }, (_, s) => s),
  };
}

async function decodeRates(model: Model): Promise<Record<string, number>> {
  const r: Record<string, number> = {};
  let step = 0;
  for (const [batch, steps] of BATCHES) {
    await model.forward(decodePlan(batch, step++));
    const t0 = performance.now();
    for (let i = 0; i < steps; i++) await model.forward(decodePlan(batch, step++));
    r[`decode_tok_s_b${batch}`] = (batch * steps) / ((performance.now() - t0) / 1000);
  }
  return r;
}

/**
 * Decode tokens/s at batch 1, 8 and 32 with CONTEXT cached tokens per sequence, f16 weights,
 * for each config and KV format (f16, int8), with the KV bytes one step reads per sequence.
 */
export async function benchWasmKv(
  configs: Record<string, ModelConfig>,
  threads: number,
  log: (s: string) => void,
): Promise<Record<string, unknown>> {
  const out: Record<string, unknown> = { wasm_kv_context_tokens: CONTEXT };
  for (const [name, config] of Object.entries(configs)) {
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
      const r = await decodeRates(model);
      r.kv_bytes_read_per_seq_step = (CONTEXT + 1) * (one.length / BLOCK);
      out[`wasm_kv_${name}_${format}`] = r;
      log(
        `  ${name} KV ${format}, ${CONTEXT} cached tokens: decode ${BATCHES.map(([b]) => `b${b} ${(r[`decode_tok_s_b${b}`] as number).toFixed(2)}`).join(', ')} tok/s`,
      );
      await model.destroy();
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
