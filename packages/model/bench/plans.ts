// Forward plans and step timing shared by the wasm benchmarks (wasm.ts, gguf-110m.ts).
import type { ForwardPlan } from '../src/execution/forward-plan.js';
import type { Model } from '../src/model/model.js';

/** KV block size of the benchmark models. */
export const BLOCK = 16;

/** The ~110M Llama the issues measure (hidden 768, 12 layers, 12 heads, tied embeddings). */
export const LLAMA_110M = {
  hiddenSize: 768,
  intermediateSize: 2048,
  numLayers: 12,
  numHeads: 12,
  vocabSize: 32000,
  tieWordEmbeddings: true,
  maxPositionEmbeddings: 2048,
} as const;

/** One sequence's `len`-token prompt in blocks `firstBlock`, `firstBlock + 1`, ... */
export function prefillPlan(len: number, firstBlock: number): ForwardPlan {
  const blocks = Array.from({ length: Math.ceil(len / BLOCK) }, (_, i) => firstBlock + i);
  return {
    tokenIds: Int32Array.from({ length: len }, (_, i) => (i * 7) % 1000),
    positions: Int32Array.from({ length: len }, (_, i) => i),
    slotMapping: Int32Array.from(
      { length: len },
      (_, i) => (blocks[Math.floor(i / BLOCK)] as number) * BLOCK + (i % BLOCK),
    ),
    rows: [{ queryStart: 0, queryLen: len, contextLen: len, blockTable: blocks }],
    logitsIndices: Int32Array.of(len - 1),
  };
}

/** `batch` sequences, each on a shared 16-token prefix (block 0) and its own block 1 + s. */
export function decodePlan(batch: number, step: number): ForwardPlan {
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

/** Seconds per step of `plans`, run in order. */
export async function timeSteps(model: Model, plans: ForwardPlan[]): Promise<number> {
  const t0 = performance.now();
  for (const p of plans) await model.forward(p);
  return (performance.now() - t0) / 1000 / plans.length;
}
