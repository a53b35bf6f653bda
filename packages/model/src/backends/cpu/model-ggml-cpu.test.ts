import { describe, expect, it } from 'vitest';
import { hostAllocator, loadBlockWeights } from '../../execution/weights.js';
import { openGgufCheckpoint } from '../../formats/gguf/reader.js';
import { unpackWeight } from '../../kernels/weight-format.js';
import {
  GGML_MODEL_FIXTURES,
  ggmlFixtureSuite,
  ggmlModelFixture,
} from '../../testing/ggml-fixture-suite.js';

describe('GGUF k-quant files', () => {
  it.each(GGML_MODEL_FIXTURES.map((f) => [f]))(
    '%s: each tensor keeps the type llama-quantize gave it, and its blocks stream unchanged',
    async (ftype) => {
      const fx = await ggmlModelFixture(ftype);
      const reader = await openGgufCheckpoint(fx.path);
      try {
        const types = new Map([...reader.tensors.values()].map((t) => [t.name, t.dtype as string]));
        expect(new Set(types.values()).size).toBeGreaterThan(1);
        const byGguf = new Map(fx.tensors.map((t) => [t.name, t.type]));
        expect(types.get('model.embed_tokens.weight')).toBe(byGguf.get('token_embd.weight'));
        expect(types.get('lm_head.weight')).toBe(byGguf.get('output.weight'));
        expect(types.get('model.layers.0.mlp.down_proj.weight')).toBe(
          byGguf.get('blk.0.ffn_down.weight'),
        );
        const whole = await loadBlockWeights(reader, hostAllocator());
        const tiny = await loadBlockWeights(reader, hostAllocator(), {
          maxChunkBytes: 64,
          maxBatchElements: 1,
        });
        const layer = whole.layers[0]!;
        const gateUp = layer.gateUp!;
        expect(layer.down!.format).toBe(byGguf.get('blk.0.ffn_down.weight'));
        expect(layer.q.format).toBe(byGguf.get('blk.0.attn_q.weight'));
        for (const [a, b] of [
          [whole.embed, tiny.embed],
          [layer.q, tiny.layers[0]!.q],
          [gateUp, tiny.layers[0]!.gateUp!],
          [whole.lmHead, tiny.lmHead],
        ] as const) {
          expect(b.data).toEqual(a.data);
        }
        // Decoded, the kept blocks are the tensors as the reader dequantizes them (Q/K
        // un-permuted, gate and up interleaved row by row).
        const cols = gateUp.cols;
        const gate = await reader.readTensorF32('model.layers.0.mlp.gate_proj.weight');
        const up = await reader.readTensorF32('model.layers.0.mlp.up_proj.weight');
        const gu = unpackWeight(gateUp);
        for (const r of [0, 1, 7, gateUp.rows / 2 - 1]) {
          expect(gu.subarray(2 * r * cols, (2 * r + 1) * cols)).toEqual(
            gate.subarray(r * cols, (r + 1) * cols),
          );
          expect(gu.subarray((2 * r + 1) * cols, (2 * r + 2) * cols)).toEqual(
            up.subarray(r * cols, (r + 1) * cols),
          );
        }
        expect(unpackWeight(layer.q)).toEqual(
          await reader.readTensorF32('model.layers.0.self_attn.q_proj.weight'),
        );
      } finally {
        await reader.close();
      }
    },
  );
});

ggmlFixtureSuite('cpu', GGML_MODEL_FIXTURES, 2e-3);
