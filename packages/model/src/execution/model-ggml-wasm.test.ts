import { describe, expect, it } from 'vitest';
import { ggmlModelFixture, klDivergence } from '../testing/ggml-fixture-suite.js';
import { seqPlan } from '../testing/model.js';
import { loadModel } from './model.js';

describe('GGUF k-quant files on the wasm backend', () => {
  it('runs Q4_K_M with its blocks dequantized to f16 at load, within f16 rounding of the CPU on the blocks', async () => {
    const fx = await ggmlModelFixture('Q4_K_M');
    const prompt = fx.llamaCpp.quantized.prompt_tokens;
    const opts = { numBlocks: 4, blockSize: 16, kvFormat: 'f32' as const };
    const wasm = await loadModel(fx.path, { ...opts, backend: 'wasm', threads: 2 });
    const cpu = await loadModel(fx.path, { ...opts, backend: 'cpu' });
    const cpuF16 = await loadModel(fx.path, { ...opts, backend: 'cpu', weightDtype: 'f16' });
    try {
      const plan = seqPlan(prompt, 0, [0], 16, 'last');
      const w = await wasm.forward(plan);
      const c = await cpu.forward(plan);
      const c16 = await cpuF16.forward(plan);
      // What wasm computes is the f16-weight model: close to it, and f16 rounding from the blocks.
      expect(klDivergence(c16, w)).toBeLessThan(1e-8);
      const kl = klDivergence(c, w);
      expect(kl).toBeGreaterThan(0);
      expect(kl).toBeLessThan(1e-5);
    } finally {
      await wasm.destroy();
      await cpu.destroy();
      await cpuF16.destroy();
    }
  });
});
