import { describe, expect, it } from 'vitest';
import {
  parseHfConfig,
  ropeConfig,
  ropeQueryScale,
  toHfConfig,
  withContextLength,
} from '../config.js';
import { ModelError } from '../errors.js';

const long = Array.from({ length: 48 }, (_, i) => 1 + i);
const short = Array.from({ length: 48 }, (_, i) => 1 + i / 100);

/** Phi-4-mini-instruct's config.json (factors shortened to distinct values). */
const PHI4_MINI = {
  architectures: ['Phi3ForCausalLM'],
  model_type: 'phi3',
  hidden_act: 'silu',
  hidden_size: 3072,
  intermediate_size: 8192,
  num_hidden_layers: 32,
  num_attention_heads: 24,
  num_key_value_heads: 8,
  max_position_embeddings: 131072,
  original_max_position_embeddings: 4096,
  partial_rotary_factor: 0.75,
  rms_norm_eps: 1e-5,
  rope_theta: 10000.0,
  rope_scaling: { long_factor: long, short_factor: short, type: 'longrope' },
  sliding_window: 262144,
  tie_word_embeddings: true,
  vocab_size: 200064,
  bos_token_id: 199999,
  eos_token_id: 199999,
};

function refusal(f: () => unknown): ModelError {
  try {
    f();
  } catch (e) {
    if (e instanceof ModelError) return e;
    throw e;
  }
  throw new Error('not refused');
}

describe('phi3 config.json', () => {
  it("Phi-4-mini: 96 of 128 dims rotated, LongRoPE's long factors past 4,096 positions, transformers' attention factor", () => {
    const c = parseHfConfig(PHI4_MINI);
    expect(c).toMatchObject({
      architecture: 'phi3',
      headDim: 128,
      rotaryDim: 96,
      numKvHeads: 8,
      tieWordEmbeddings: true,
      slidingWindow: 262144,
      ropeScaling: {
        type: 'longrope',
        longFactors: long,
        shortFactors: short,
        originalMaxPositionEmbeddings: 4096,
      },
    });
    // sqrt(1 + ln(131072 / 4096) / ln(4096))
    expect(c.ropeAttentionFactor).toBeCloseTo(1.1902380714, 9);
    expect(ropeQueryScale(c)).toBeCloseTo(1.1902380714 ** 2, 9);
    const r = ropeConfig(c, 8);
    expect(r.rotaryDim).toBe(96);
    expect(r.freqFactors).toEqual(long);
    // Within the original context the short factors apply.
    expect(ropeConfig({ ...c, maxPositionEmbeddings: 4096 }, 8).freqFactors).toEqual(short);
  });

  it('round-trips through toHfConfig', () => {
    const c = parseHfConfig(PHI4_MINI);
    expect(parseHfConfig(toHfConfig(c))).toEqual(c);
  });

  it('an explicit attention_factor wins; no rope_scaling means plain RoPE over the rotated dims', () => {
    const given = parseHfConfig({
      ...PHI4_MINI,
      rope_scaling: { ...PHI4_MINI.rope_scaling, attention_factor: 1.5 },
    });
    expect(given.ropeAttentionFactor).toBe(1.5);
    const plain = parseHfConfig({ ...PHI4_MINI, rope_scaling: null });
    expect(plain.ropeScaling).toBeNull();
    expect(plain.ropeAttentionFactor).toBeUndefined();
    expect(ropeConfig(plain, 8)).toMatchObject({ rotaryDim: 96 });
    expect(ropeConfig(plain, 8).freqFactors).toBeUndefined();
  });

  it.each([
    [
      'a factor list of the wrong length',
      { rope_scaling: { ...PHI4_MINI.rope_scaling, long_factor: long.slice(1) } },
      'INVALID_CONFIG',
      'long_factor',
    ],
    [
      'a non-positive factor',
      { rope_scaling: { ...PHI4_MINI.rope_scaling, short_factor: [0, ...short.slice(1)] } },
      'INVALID_CONFIG',
      'short_factor',
    ],
    [
      'no original context',
      { original_max_position_embeddings: undefined },
      'INVALID_CONFIG',
      'original_max_position_embeddings',
    ],
    [
      'a partial_rotary_factor above 1',
      { partial_rotary_factor: 1.5 },
      'INVALID_CONFIG',
      'partial_rotary_factor',
    ],
    [
      'another RoPE scaling',
      { rope_scaling: { type: 'yarn', factor: 4 } },
      'UNSUPPORTED_ARCHITECTURE',
      'yarn',
    ],
  ])('refuses %s, naming it', (_, over, code, what) => {
    const e = refusal(() => parseHfConfig({ ...PHI4_MINI, ...over }));
    expect(e.code).toBe(code);
    expect(e.message).toContain(what);
  });
});

describe('withContextLength', () => {
  it("LongRoPE's factors follow the context; other configs are left as they are", () => {
    const c = parseHfConfig(PHI4_MINI);
    expect(ropeConfig(withContextLength(c, 4096), 8).freqFactors).toEqual(short);
    expect(ropeConfig(withContextLength(c, 4097), 8).freqFactors).toEqual(long);
    expect(withContextLength(c, undefined)).toBe(c);
    expect(withContextLength(c, 1 << 20)).toBe(c);
    const plain = parseHfConfig({ ...PHI4_MINI, rope_scaling: null });
    expect(withContextLength(plain, 100)).toBe(plain);
  });
});
