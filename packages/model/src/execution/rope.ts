import { type ModelConfig, ropeInvFrequencies } from '../config.js';

/**
 * RoPE cos/sin tables `[positions][headDim/2]` in f32, computed as PyTorch does for HF Llama
 * (f32 inverse frequencies, f32 angle, f32 cos/sin), so the CPU and GPU paths rotate by the
 * same numbers. Pair i rotates dims (i, i + headDim/2) (rotate-half).
 */
export function ropeTables(
  c: ModelConfig,
  positions: number,
): { cos: Float32Array; sin: Float32Array } {
  const half = c.headDim / 2;
  const inv = Float32Array.from(ropeInvFrequencies(c));
  const cos = new Float32Array(positions * half);
  const sin = new Float32Array(positions * half);
  for (let p = 0; p < positions; p++) {
    for (let i = 0; i < half; i++) {
      const a = Math.fround((inv[i] as number) * p);
      cos[p * half + i] = Math.cos(a);
      sin[p * half + i] = Math.sin(a);
    }
  }
  return { cos, sin };
}

/** Rotates `heads` rows of `headDim` starting at `x[offset]` by position row `pos` of the tables. */
export function applyRopeRows(
  x: Float32Array,
  offset: number,
  heads: number,
  headDim: number,
  cos: Float32Array,
  sin: Float32Array,
  pos: number,
): void {
  const half = headDim / 2;
  for (let h = 0; h < heads; h++) {
    const base = offset + h * headDim;
    for (let i = 0; i < half; i++) {
      const c = cos[pos * half + i] as number;
      const s = sin[pos * half + i] as number;
      const x0 = x[base + i] as number;
      const x1 = x[base + i + half] as number;
      x[base + i] = x0 * c - x1 * s;
      x[base + i + half] = x1 * c + x0 * s;
    }
  }
}
