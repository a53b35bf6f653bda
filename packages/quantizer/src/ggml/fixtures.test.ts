// Every block format against llama.cpp's own code, bit for bit, on the fixtures
// tooling/ggml-fixtures/make_fixtures.py wrote. Dequantization: gguf-py's numpy decoders on blocks
// with edge-value f16 scales (zero, ±max, subnormals, infinity, negative minimums), every code
// point and every sub-block scale. Quantization: ggml-quants.c's `quantize_row_*_ref` (compiled
// without FP contraction; for the legacy formats the script also checks gguf-py's numpy
// quantizer gives the same bytes) on rows of ties, outliers, mixed magnitudes and f16 overflow.

import { readFileSync } from 'node:fs';
import { gunzipSync } from 'node:zlib';
import { describe, expect, it } from 'vitest';
import { GGML_BLOCK_FORMATS, type GgmlBlockType } from './types.js';

interface Fixture {
  readonly blocks: Uint8Array;
  readonly values: Float32Array;
  readonly quantBlocks: Uint8Array;
}

function readGz(file: string): Uint8Array {
  const raw = gunzipSync(readFileSync(new URL(`./fixtures/${file}`, import.meta.url)));
  return new Uint8Array(raw.buffer, raw.byteOffset, raw.byteLength).slice();
}

/** The f32 rows every quantizer fixture encodes (14 rows of 256). */
const quantInput = new Float32Array(readGz('quantize-input.f32.gz').buffer);

function readFixture(name: GgmlBlockType): Fixture {
  const f = GGML_BLOCK_FORMATS[name];
  const bytes = readGz(`${name}.bin.gz`);
  const view = new DataView(bytes.buffer);
  const nBlocks = view.getUint32(0, true);
  const nQuant = view.getUint32(4, true);
  let o = 8;
  const take = (n: number) => {
    o += n;
    return bytes.slice(o - n, o);
  };
  const blocks = take(nBlocks * f.bytesPerBlock);
  const values = new Float32Array(take(nBlocks * f.blockSize * 4).buffer);
  expect(nQuant).toBe(quantInput.length);
  const quantBlocks = take((nQuant / f.blockSize) * f.bytesPerBlock);
  expect(o).toBe(bytes.length);
  return { blocks, values, quantBlocks };
}

/** Indices where two f32 arrays differ in bits; any NaN matches any NaN (payloads vary by CPU). */
function bitMismatches(a: Float32Array, b: Float32Array): number[] {
  const ua = new Uint32Array(a.buffer, a.byteOffset, a.length);
  const ub = new Uint32Array(b.buffer, b.byteOffset, b.length);
  const bad: number[] = [];
  for (let i = 0; i < a.length; i++) {
    if (ua[i] !== ub[i] && !(Number.isNaN(a[i]) && Number.isNaN(b[i]))) bad.push(i);
  }
  return bad;
}

const names = Object.keys(GGML_BLOCK_FORMATS) as GgmlBlockType[];

describe.each(names)('%s against gguf-py', (name) => {
  const f = GGML_BLOCK_FORMATS[name];
  const fx = readFixture(name);

  it('dequantizes every fixture block to the same f32 bits', () => {
    const out = new Float32Array(fx.values.length);
    f.dequantize(fx.blocks, 0, out, 0, out.length);
    expect(bitMismatches(out, fx.values).slice(0, 10)).toEqual([]);
    // The fixture really holds the edge cases it claims.
    expect(fx.values.some((v) => Math.abs(v) > 65504)).toBe(true);
    expect(fx.values.some((v) => v !== 0 && Math.abs(v) < 2 ** -14)).toBe(true);
  });

  it('dequantizes at offsets, one block at a time, as in one call', () => {
    const all = new Float32Array(fx.values.length);
    f.dequantize(fx.blocks, 0, all, 0, all.length);
    const padded = new Uint8Array(fx.blocks.length + 7);
    padded.set(fx.blocks, 3);
    const one = new Float32Array(f.blockSize + 5);
    for (let b = 0; b < fx.values.length / f.blockSize; b++) {
      f.dequantize(padded, 3 + b * f.bytesPerBlock, one, 5, f.blockSize);
      expect(
        bitMismatches(one.subarray(5), all.subarray(b * f.blockSize, (b + 1) * f.blockSize)),
      ).toEqual([]);
    }
  });
});

describe.each(names)('%s quantizer against ggml-quants.c', (name) => {
  it('quantizes the edge-case rows to the same bytes', () => {
    const f = GGML_BLOCK_FORMATS[name];
    const fx = readFixture(name);
    const out = new Uint8Array(fx.quantBlocks.length);
    f.quantize(quantInput, 0, out, 0, quantInput.length);
    const bad: number[] = [];
    for (let i = 0; i < out.length; i++) if (out[i] !== fx.quantBlocks[i]) bad.push(i);
    expect(bad.slice(0, 10)).toEqual([]);
  });
});
