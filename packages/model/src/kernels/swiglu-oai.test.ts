// gpt-oss's clamped SwiGLU as ggml's swiglu_oai computes it (ops.cpp: x = min(gate, limit),
// y = clamp(up, -limit, limit), x / (1 + exp(-alpha x)) * (y + 1), alpha 1.702, limit 7), and as
// the matmul epilogue over interleaved gate/up rows.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { matmulRef, swigluOai } from './reference.js';
import { packWeight } from './weight-format.js';

const ggml = (g: number, u: number) => {
  const x = Math.min(g, 7);
  const y = Math.min(Math.max(u, -7), 7);
  return (x / (1 + Math.exp(-1.702 * x))) * (y + 1);
};

describe('swiglu-oai', () => {
  it('clamps the gate above only and the up value both ways, at 7', () => {
    expect(swigluOai(50, 0)).toBe(swigluOai(7, 0));
    expect(swigluOai(-50, 1)).not.toBe(swigluOai(-7, 1));
    expect(swigluOai(1, 50)).toBe(swigluOai(1, 7));
    expect(swigluOai(1, -50)).toBe(swigluOai(1, -7));
    // up + 1: a zero up value passes the gated gate through.
    expect(swigluOai(2, 0)).toBeCloseTo(2 / (1 + Math.exp(-3.404)), 12);
  });

  it("equals ggml's formula for any gate and up value", () => {
    fc.assert(
      fc.property(
        fc.double({ min: -40, max: 40, noNaN: true }),
        fc.double({ min: -40, max: 40, noNaN: true }),
        (g, u) => Math.abs(swigluOai(g, u) - ggml(g, u)) <= 1e-12 * (1 + Math.abs(ggml(g, u))),
      ),
    );
  });

  it('is the swiglu-oai matmul epilogue over interleaved gate/up rows, bias included', () => {
    const rows = 6;
    const cols = 4;
    const w = Float32Array.from({ length: rows * cols }, (_, i) => Math.sin(i) * 3);
    const bias = Float32Array.from({ length: rows }, (_, i) => i - 2);
    const x = Float32Array.from({ length: 2 * cols }, (_, i) => Math.cos(i) * 2);
    const y = matmulRef(x, 2, packWeight(w, rows, cols, 'f32'), { bias, epilogue: 'swiglu-oai' });
    const v = matmulRef(x, 2, packWeight(w, rows, cols, 'f32'), { bias });
    for (let i = 0; i < 2; i++) {
      for (let j = 0; j < rows / 2; j++) {
        expect(y[i * 3 + j]).toBeCloseTo(
          swigluOai(v[i * rows + 2 * j] as number, v[i * rows + 2 * j + 1] as number),
          5,
        );
      }
    }
  });
});
