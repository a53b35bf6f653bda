import { AttentionKernelError } from '../errors.js';

/** Which elements rotate together. */
export type RopeStyle =
  /** Hugging Face Llama / GPT-NeoX: element `i` pairs with `i + rotaryDim/2`. */
  | 'rotate-half'
  /** GPT-J / GGUF (llama.cpp): element `2i` pairs with `2i + 1`. */
  | 'interleaved';

/** Llama-3.1-style frequency scaling (`rope_scaling` with `rope_type: "llama3"` in HF configs). */
export interface Llama3RopeScaling {
  readonly factor: number;
  readonly lowFreqFactor: number;
  readonly highFreqFactor: number;
  readonly originalMaxPositionEmbeddings: number;
}

/** What fixes a RoPE kernel. */
export interface RopeConfig {
  readonly numQHeads: number;
  readonly numKvHeads: number;
  readonly headDim: number;
  /** Leading dimensions that rotate (even, ≤ headDim; default headDim). */
  readonly rotaryDim?: number;
  readonly style: RopeStyle;
  /** Base of the frequencies (`rope_theta`; default 10 000). */
  readonly theta?: number;
  /** Positions must be below this (size of the cos/sin tables). */
  readonly maxPosition: number;
  readonly scaling?: Llama3RopeScaling;
  /**
   * Per-pair divisors of the inverse frequencies (`rotaryDim / 2` positive values), applied
   * after `scaling`: what GGUF files carry in their `rope_freqs` tensor. Hugging Face's linear
   * scaling (position interpolation) is every factor equal to its `factor`.
   */
  readonly freqFactors?: readonly number[];
}

/** Precomputed f32 tables `[maxPosition][rotaryDim / 2]`. */
export interface RopeTables {
  readonly cos: Float32Array;
  readonly sin: Float32Array;
  /** `rotaryDim / 2`. */
  readonly half: number;
}

/**
 * Check a RoPE configuration and return its rotary dim.
 *
 * @throws {AttentionKernelError} `INVALID_ARGUMENT` for bad sizes or scaling,
 *   `UNSUPPORTED_HEAD_DIM` for an odd head dim.
 */
export function checkRopeConfig(config: RopeConfig): number {
  for (const [name, v] of [
    ['numQHeads', config.numQHeads],
    ['numKvHeads', config.numKvHeads],
    ['headDim', config.headDim],
    ['maxPosition', config.maxPosition],
  ] as const) {
    if (!Number.isInteger(v) || v <= 0) {
      throw new AttentionKernelError(
        'INVALID_ARGUMENT',
        `${name} must be a positive integer, got ${v}.`,
      );
    }
  }
  if (config.headDim % 2 !== 0) {
    throw new AttentionKernelError(
      'UNSUPPORTED_HEAD_DIM',
      `RoPE needs an even head dim, got ${config.headDim}.`,
    );
  }
  const rot = config.rotaryDim ?? config.headDim;
  if (!Number.isInteger(rot) || rot <= 0 || rot % 2 !== 0 || rot > config.headDim) {
    throw new AttentionKernelError(
      'INVALID_ARGUMENT',
      `rotaryDim must be even and in (0, headDim=${config.headDim}], got ${rot}.`,
    );
  }
  if (config.style !== 'rotate-half' && config.style !== 'interleaved') {
    throw new AttentionKernelError(
      'INVALID_ARGUMENT',
      `Unknown RoPE style '${String(config.style)}'.`,
    );
  }
  const theta = config.theta ?? 10000;
  if (!(theta > 1) || !Number.isFinite(theta)) {
    throw new AttentionKernelError(
      'INVALID_ARGUMENT',
      `theta must be finite and > 1, got ${theta}.`,
    );
  }
  const s = config.scaling;
  if (s !== undefined) {
    const ok =
      s.factor > 0 &&
      s.lowFreqFactor > 0 &&
      s.highFreqFactor > s.lowFreqFactor &&
      s.originalMaxPositionEmbeddings > 0;
    if (!ok) {
      throw new AttentionKernelError(
        'INVALID_ARGUMENT',
        'Llama-3 scaling needs factor > 0, 0 < lowFreqFactor < highFreqFactor, originalMaxPositionEmbeddings > 0.',
        { details: { ...s } },
      );
    }
  }
  const ff = config.freqFactors;
  if (
    ff !== undefined &&
    (ff.length !== rot / 2 || !ff.every((f) => f > 0 && Number.isFinite(f)))
  ) {
    throw new AttentionKernelError(
      'INVALID_ARGUMENT',
      `freqFactors must be ${rot / 2} finite positive values (rotaryDim / 2), got ${ff.length}.`,
    );
  }
  return rot;
}

/**
 * The inverse frequencies `theta^(-2i/rotaryDim)`, i < rotaryDim/2, in f64, with Llama-3
 * scaling applied when configured (wavelengths shorter than `original / highFreqFactor` keep
 * their frequency, longer than `original / lowFreqFactor` are divided by `factor`, and those in
 * between are interpolated smoothly, as Hugging Face's `_compute_llama3_parameters`), then
 * divided by `freqFactors` when given.
 *
 * @throws {AttentionKernelError} as {@link checkRopeConfig}.
 */
export function ropeInvFrequencies(config: RopeConfig): Float64Array {
  const rot = checkRopeConfig(config);
  const theta = config.theta ?? 10000;
  const half = rot / 2;
  const inv = new Float64Array(half);
  for (let i = 0; i < half; i++) inv[i] = 1 / theta ** ((2 * i) / rot);
  const s = config.scaling;
  if (s !== undefined) {
    const lowFreqWavelen = s.originalMaxPositionEmbeddings / s.lowFreqFactor;
    const highFreqWavelen = s.originalMaxPositionEmbeddings / s.highFreqFactor;
    for (let i = 0; i < half; i++) {
      const f = inv[i]!;
      const wavelen = (2 * Math.PI) / f;
      if (wavelen < highFreqWavelen) continue;
      if (wavelen > lowFreqWavelen) {
        inv[i] = f / s.factor;
      } else {
        const smooth =
          (s.originalMaxPositionEmbeddings / wavelen - s.lowFreqFactor) /
          (s.highFreqFactor - s.lowFreqFactor);
        inv[i] = ((1 - smooth) * f) / s.factor + smooth * f;
      }
    }
  }
  const ff = config.freqFactors;
  if (ff !== undefined) for (let i = 0; i < half; i++) inv[i] = inv[i]! / ff[i]!;
  return inv;
}

/**
 * The cos/sin tables the CPU reference and the GPU kernel share, computed in f64 and rounded
 * once to f32, so both sides rotate with identical factors.
 *
 * @throws {AttentionKernelError} as {@link checkRopeConfig}.
 */
export function ropeTables(config: RopeConfig): RopeTables {
  const inv = ropeInvFrequencies(config);
  const half = inv.length;
  const cos = new Float32Array(config.maxPosition * half);
  const sin = new Float32Array(config.maxPosition * half);
  for (let p = 0; p < config.maxPosition; p++) {
    for (let i = 0; i < half; i++) {
      const a = p * inv[i]!;
      cos[p * half + i] = Math.cos(a);
      sin[p * half + i] = Math.sin(a);
    }
  }
  return { cos, sin, half };
}

/** Element indices of rotation pair `i` for a style. */
export function ropePair(style: RopeStyle, half: number, i: number): [number, number] {
  return style === 'rotate-half' ? [i, i + half] : [2 * i, 2 * i + 1];
}

const fr = Math.fround;

/**
 * CPU twin of the RoPE kernel: rotate `q` (`[numTokens][numQHeads][headDim]`) and `k`
 * (`[numTokens][numKvHeads][headDim]`) in place, token `t` at `positions[t]`, with the same f32
 * operations as the GPU (`x0·c − x1·s`, `x1·c + x0·s`).
 *
 * @throws {AttentionKernelError} `SHAPE_MISMATCH` for inconsistent lengths, `INVALID_ARGUMENT`
 *   for a position ≥ `maxPosition`; nothing is modified then.
 */
export function applyRopeReference(
  config: RopeConfig,
  tables: RopeTables,
  q: Float32Array,
  k: Float32Array,
  positions: Uint32Array,
): void {
  checkRopeConfig(config);
  const n = positions.length;
  const D = config.headDim;
  if (q.length !== n * config.numQHeads * D || k.length !== n * config.numKvHeads * D) {
    throw new AttentionKernelError(
      'SHAPE_MISMATCH',
      `q/k have ${q.length}/${k.length} floats; ${n} tokens need ${n * config.numQHeads * D}/${n * config.numKvHeads * D}.`,
    );
  }
  checkPositions(positions, n, config.maxPosition);
  const half = tables.half;
  const rotate = (x: Float32Array, heads: number): void => {
    for (let t = 0; t < n; t++) {
      const base = positions[t]! * half;
      for (let h = 0; h < heads; h++) {
        const row = (t * heads + h) * D;
        for (let i = 0; i < half; i++) {
          const [a, b] = ropePair(config.style, half, i);
          const c = tables.cos[base + i]!;
          const s = tables.sin[base + i]!;
          const x0 = x[row + a]!;
          const x1 = x[row + b]!;
          x[row + a] = fr(fr(x0 * c) - fr(x1 * s));
          x[row + b] = fr(fr(x1 * c) + fr(x0 * s));
        }
      }
    }
  };
  rotate(q, config.numQHeads);
  rotate(k, config.numKvHeads);
}

/**
 * Check host positions: `numTokens` entries, each below `maxPosition`.
 *
 * @throws {AttentionKernelError} `SHAPE_MISMATCH` or `INVALID_ARGUMENT`.
 */
export function checkPositions(
  positions: Uint32Array,
  numTokens: number,
  maxPosition: number,
): void {
  if (positions.length !== numTokens) {
    throw new AttentionKernelError(
      'SHAPE_MISMATCH',
      `positions has ${positions.length} entries for ${numTokens} tokens.`,
    );
  }
  for (let t = 0; t < numTokens; t++) {
    if (positions[t]! >= maxPosition) {
      throw new AttentionKernelError(
        'INVALID_ARGUMENT',
        `positions[${t}] = ${positions[t]} is not below maxPosition ${maxPosition}.`,
        { details: { token: t, position: positions[t], maxPosition } },
      );
    }
  }
}
