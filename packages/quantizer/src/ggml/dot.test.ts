import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { QuantizerError } from '../errors.js';
import { ggmlDot, ggmlMatVec } from './dot.js';
import { GGML_BLOCK_FORMATS, type GgmlBlockType } from './types.js';

const TYPES = Object.keys(GGML_BLOCK_FORMATS) as GgmlBlockType[];

/** A random matrix of `type` (finite f16 scales), its dequantized copy, and a vector. */
const problem = (type: GgmlBlockType) => {
  const f = GGML_BLOCK_FORMATS[type];
  return fc
    .record({
      rows: fc.integer({ min: 1, max: 4 }),
      blocksPerRow: fc.integer({ min: 1, max: 3 }),
      seed: fc.integer(),
      scale: fc.constantFrom(1e-3, 1, 1e3),
    })
    .map(({ rows, blocksPerRow, seed, scale }) => {
      const cols = blocksPerRow * f.blockSize;
      let s = seed >>> 0;
      const next = () => {
        s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
        return s / 2 ** 32;
      };
      const w = Float32Array.from({ length: rows * cols }, () => (next() * 2 - 1) * scale);
      const bytes = new Uint8Array(3 + (rows * cols * f.bytesPerBlock) / f.blockSize);
      f.quantize(w, 0, bytes, 3, rows * cols);
      const x = Float32Array.from({ length: cols + 1 }, () => next() * 2 - 1);
      return { rows, cols, bytes, x };
    });
};

describe.each(TYPES)('%s dot products from blocks', (type) => {
  const f = GGML_BLOCK_FORMATS[type];

  it('equal dequantize-then-dot exactly, row by row and as a matrix-vector product', () => {
    fc.assert(
      fc.property(problem(type), ({ rows, cols, bytes, x }) => {
        const dense = new Float32Array(rows * cols);
        f.dequantize(bytes, 3, dense, 0, rows * cols);
        const out = new Float32Array(rows + 2);
        ggmlMatVec(type, bytes, 3, rows, cols, x, 1, out, 2);
        const rowBytes = (cols / f.blockSize) * f.bytesPerBlock;
        for (let r = 0; r < rows; r++) {
          let want = 0;
          for (let c = 0; c < cols; c++) want += dense[r * cols + c]! * x[1 + c]!;
          expect(ggmlDot(f.id, bytes, 3 + r * rowBytes, x, 1, cols)).toBe(want);
          expect(out[2 + r]).toBe(Math.fround(want));
        }
      }),
      { numRuns: 40 },
    );
  });
});

describe('dot product argument checks', () => {
  it('refuses partial blocks, short buffers and unsupported types with typed errors', () => {
    const code = (fn: () => void) => {
      try {
        fn();
      } catch (e) {
        return QuantizerError.isInstance(e) ? e.code : 'other';
      }
      return 'none';
    };
    const x = new Float32Array(256);
    expect(code(() => ggmlDot('Q4_K', new Uint8Array(144), 0, x, 0, 255))).toBe('BAD_SHAPE');
    expect(code(() => ggmlDot('Q4_K', new Uint8Array(143), 0, x, 0, 256))).toBe('LENGTH_MISMATCH');
    expect(code(() => ggmlDot('Q4_K', new Uint8Array(144), 0, x, 1, 256))).toBe('LENGTH_MISMATCH');
    expect(code(() => ggmlDot(16, new Uint8Array(144), 0, x, 0, 256))).toBe(
      'UNSUPPORTED_GGML_TYPE',
    );
    const out = new Float32Array(1);
    expect(code(() => ggmlMatVec('Q8_0', new Uint8Array(68), 0, 2, 32, x, 0, out, 0))).toBe(
      'LENGTH_MISMATCH',
    );
  });
});
