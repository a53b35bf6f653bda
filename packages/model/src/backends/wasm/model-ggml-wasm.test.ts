import { describe, expect, it } from 'vitest';
import { loadBlockWeights } from '../../execution/weights.js';
import { openGgufCheckpoint } from '../../formats/gguf/reader.js';
import { loadModel } from '../../model/model.js';
import {
  GGML_MODEL_FIXTURES,
  ggmlFixtureSuite,
  ggmlModelFixture,
} from '../../testing/ggml-fixture-suite.js';
import { seqPlan } from '../../testing/model.js';
import { createWasmRuntime } from './wasm-runtime.js';
import { wasmAllocator, weightBytes } from './wasm-weights.js';

// The wasm kernels multiply the file's blocks in place with activations quantized to 8 bits per
// block of 32, as llama.cpp's CPU kernels do: the distribution of the f32-dequantized weights
// within the KL llama.cpp's own run on the blocks keeps from it (~1e-4), llama.cpp's f32 logits
// within 3e-2 (0.020-0.024 here; llama.cpp's own run on the blocks is 0.025-0.040 from them),
// and llama.cpp's greedy tokens.
ggmlFixtureSuite('wasm', GGML_MODEL_FIXTURES, 3e-2, { blocks: 1e-4, llamaF32: 1e-4 });

describe('GGUF block weights on the wasm backend', () => {
  it('Q4_K_M: wasm memory holds the file blocks (its bytes, not f16), each matrix keeps its type', async () => {
    const fx = await ggmlModelFixture('Q4_K_M');
    const reader = await openGgufCheckpoint(fx.path);
    const rt = await createWasmRuntime({ threads: 1, reserveBytes: 1 << 20 });
    try {
      const before = rt.arena.top;
      const w = await loadBlockWeights(reader, wasmAllocator(rt.arena));
      const byGguf = new Map(fx.tensors.map((t) => [t.name, t.type]));
      expect(w.layers[0]!.down!.format).toBe(byGguf.get('blk.0.ffn_down.weight'));
      expect(w.lmHead.format).toBe(byGguf.get('output.weight'));
      const matrices = [
        w.embed,
        w.lmHead,
        ...w.layers.flatMap((l) => [l.q, l.k, l.v, l.o, l.gateUp!, l.down!]),
      ];
      const stored = matrices.reduce((a, m) => a + weightBytes(m), 0);
      // Everything the loader allocated is the blocks (plus word and 64-byte alignment).
      expect(rt.arena.top - before).toBeLessThan(stored + matrices.length * 72);
      // ... and the blocks are what the file holds for those tensors.
      let fileBytes = 0;
      for (const t of reader.tensors.values()) if (t.shape.length === 2) fileBytes += t.byteLength;
      expect(stored).toBe(fileBytes);
    } finally {
      await rt.close();
      await reader.close();
    }
  });

  it('Q4_K_M: the same logits on 1, 2 and 3 threads', async () => {
    const fx = await ggmlModelFixture('Q4_K_M');
    const plan = seqPlan(fx.llamaCpp.quantized.prompt_tokens, 0, [0], 16, 'last');
    const results: Float32Array[] = [];
    for (const threads of [1, 2, 3]) {
      const m = await loadModel(fx.path, {
        numBlocks: 4,
        blockSize: 16,
        kvFormat: 'f32',
        backend: 'wasm',
        threads,
      });
      try {
        results.push(await m.forward(plan));
      } finally {
        await m.destroy();
      }
    }
    expect(results[1]).toEqual(results[0]);
    expect(results[2]).toEqual(results[0]);
  });
});
