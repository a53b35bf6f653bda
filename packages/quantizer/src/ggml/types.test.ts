import { describe, expect, it } from 'vitest';
import { QuantizerError } from '../errors.js';
import {
  GGML_BLOCK_FORMATS,
  GGML_TYPE_IDS,
  ggmlBlockFormat,
  ggmlRowBytes,
  ggmlTypeName,
  isGgmlBlockType,
} from './types.js';

describe('GGML block format registry', () => {
  it('has ggml.h ids and the bits per weight ggml documents (ggml-common.h comments)', () => {
    const bpw = Object.fromEntries(
      Object.values(GGML_BLOCK_FORMATS).map((f) => [f.name, f.bitsPerWeight]),
    );
    expect(bpw).toEqual({
      Q4_0: 4.5,
      Q4_1: 5,
      Q5_0: 5.5,
      Q5_1: 6,
      Q8_0: 8.5,
      Q2_K: 2.625,
      Q3_K: 3.4375,
      Q4_K: 4.5,
      Q5_K: 5.5,
      Q6_K: 6.5625,
      IQ4_NL: 4.5,
      MXFP4: 4.25,
    });
    for (const f of Object.values(GGML_BLOCK_FORMATS)) {
      expect(ggmlBlockFormat(f.id)).toBe(f);
      expect(ggmlBlockFormat(f.name)).toBe(f);
      expect(ggmlTypeName(f.id)).toBe(f.name);
      expect(isGgmlBlockType(f.id) && isGgmlBlockType(f.name)).toBe(true);
    }
    expect(GGML_TYPE_IDS.Q4_K).toBe(12);
    expect(ggmlRowBytes('Q4_K', 4096)).toBe(16 * 144);
  });

  it('refuses other GGML types with a typed error naming the type', () => {
    for (const [type, text] of [
      [GGML_TYPE_IDS.IQ2_XXS, 'IQ2_XXS (GGML type 16)'],
      [GGML_TYPE_IDS.F16, 'F16 (GGML type 1)'],
      [99, 'unknown type 99 (GGML type 99)'],
      ['Q4_K_M', "'Q4_K_M'"],
      ['TQ1_0', "'TQ1_0' (GGML type 34)"],
    ] as const) {
      expect(isGgmlBlockType(type)).toBe(false);
      let error: unknown;
      try {
        ggmlBlockFormat(type);
      } catch (e) {
        error = e;
      }
      expect(QuantizerError.isInstance(error)).toBe(true);
      expect((error as QuantizerError).code).toBe('UNSUPPORTED_GGML_TYPE');
      expect((error as Error).message).toContain(text);
    }
  });

  it('refuses partial blocks and out-of-range buffers before writing', () => {
    const f = GGML_BLOCK_FORMATS.Q4_K;
    const out = new Float32Array(512).fill(7);
    const code = (fn: () => void) => {
      try {
        fn();
      } catch (e) {
        return QuantizerError.isInstance(e) ? e.code : 'other';
      }
      return 'none';
    };
    expect(code(() => f.dequantize(new Uint8Array(288), 0, out, 0, 100))).toBe('BAD_SHAPE');
    expect(code(() => f.dequantize(new Uint8Array(287), 0, out, 0, 512))).toBe('LENGTH_MISMATCH');
    expect(code(() => f.dequantize(new Uint8Array(288), 1, out, 0, 512))).toBe('LENGTH_MISMATCH');
    expect(code(() => f.dequantize(new Uint8Array(288), 0, out, 1, 512))).toBe('LENGTH_MISMATCH');
    expect(code(() => f.quantize(out, 0, new Uint8Array(100), 0, 256))).toBe('LENGTH_MISMATCH');
    expect(code(() => ggmlRowBytes('Q8_0', 33))).toBe('BAD_SHAPE');
    expect(out.every((v) => v === 7)).toBe(true);
  });
});
