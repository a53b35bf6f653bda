import { describe, expect, it } from 'vitest';
import { ggmlModelFixture } from '../testing/ggml-fixture-suite.js';
import { openGgufCheckpoint } from './gguf/reader.js';
import { summarizeWeights } from './weight-summary.js';

describe('summarizeWeights', () => {
  it("counts a Q4_K_M file's tensors per type as llama-quantize wrote them", async () => {
    const fx = await ggmlModelFixture('Q4_K_M');
    const reader = await openGgufCheckpoint(fx.path);
    try {
      const s = summarizeWeights(reader);
      const expected = new Map<string, { tensors: number; parameters: number }>();
      for (const t of fx.tensors) {
        const e = expected.get(t.type) ?? { tensors: 0, parameters: 0 };
        e.tensors++;
        e.parameters += t.shape.reduce((a, b) => a * b, 1);
        expected.set(t.type, e);
      }
      expect(
        new Map(
          s.types.map((t) => [t.dtype as string, { tensors: t.tensors, parameters: t.parameters }]),
        ),
      ).toEqual(expected);
      expect(s.types[0]?.dtype).toBe('Q4_K');
      const q4k = s.types.find((t) => t.dtype === 'Q4_K')!;
      expect(q4k.bytes).toBe((q4k.parameters / 256) * 144);
      expect(s.bytes).toBe(reader.totalBytes);
      expect(s.bitsPerWeight).toBeCloseTo((8 * reader.totalBytes) / s.parameters, 12);
      expect(s.bitsPerWeight).toBeGreaterThan(4.5);
      expect(s.bitsPerWeight).toBeLessThan(6.5625);
    } finally {
      await reader.close();
    }
  });
});
