// Matrix-vector products straight from GGML blocks (no whole-tensor dequantization, no
// allocation per call), so a quantized weight matrix costs its GGUF bytes in memory. The result
// equals decoding the row with the block format's `dequantize` and summing `w[i] · x[i]` in
// order in double precision, bit for bit: the fused loops below round each weight to f32 as the
// decoder does (Math.fround of the same expression) before multiplying. The commonest types of
// k-quant files (Q4_K, Q5_K, Q6_K, Q8_0, Q4_0) have fused loops; the others decode a block at a
// time into a scratch.

import { QuantizerError } from '../errors.js';
import { checkBlocks, f16At } from './block-io.js';
import { scaleMinK4 } from './k-quants.js';
import { type GgmlBlockType, ggmlBlockFormat } from './types.js';

const scratch = new Float32Array(256);
const fr = Math.fround;

/** A fused row dot: `nBlocks` blocks from byte `o` against `x` from `xi`, arguments checked. */
type RowDot = (src: Uint8Array, o: number, x: Float32Array, xi: number, nBlocks: number) => number;

const sm = new Uint8Array(2);

const FUSED: Partial<Record<GgmlBlockType, RowDot>> = {
  Q4_0(src, o, x, xi, nBlocks) {
    let sum = 0;
    for (let b = 0; b < nBlocks; b++, o += 18, xi += 32) {
      const d = f16At(src, o);
      for (let j = 0; j < 16; j++) {
        const q = src[o + 2 + j]!;
        sum += fr(((q & 15) - 8) * d) * x[xi + j]!;
      }
      for (let j = 0; j < 16; j++) sum += fr(((src[o + 2 + j]! >>> 4) - 8) * d) * x[xi + 16 + j]!;
    }
    return sum;
  },
  Q8_0(src, o, x, xi, nBlocks) {
    let sum = 0;
    for (let b = 0; b < nBlocks; b++, o += 34, xi += 32) {
      const d = f16At(src, o);
      for (let j = 0; j < 32; j++) sum += fr(((src[o + 2 + j]! << 24) >> 24) * d) * x[xi + j]!;
    }
    return sum;
  },
  Q4_K(src, o, x, xi, nBlocks) {
    let sum = 0;
    for (let b = 0; b < nBlocks; b++, o += 144, xi += 256) {
      const d = f16At(src, o);
      const dmin = f16At(src, o + 2);
      for (let j = 0; j < 4; j++) {
        const q = o + 16 + 32 * j;
        const xo = xi + 64 * j;
        scaleMinK4(2 * j, src, o + 4, sm);
        let dl = d * sm[0]!;
        let ml = dmin * sm[1]!;
        for (let l = 0; l < 32; l++) sum += fr(dl * (src[q + l]! & 0xf) - ml) * x[xo + l]!;
        scaleMinK4(2 * j + 1, src, o + 4, sm);
        dl = d * sm[0]!;
        ml = dmin * sm[1]!;
        for (let l = 0; l < 32; l++) sum += fr(dl * (src[q + l]! >>> 4) - ml) * x[xo + 32 + l]!;
      }
    }
    return sum;
  },
  Q5_K(src, o, x, xi, nBlocks) {
    let sum = 0;
    for (let b = 0; b < nBlocks; b++, o += 176, xi += 256) {
      const d = f16At(src, o);
      const dmin = f16At(src, o + 2);
      for (let j = 0; j < 4; j++) {
        const q = o + 48 + 32 * j;
        const xo = xi + 64 * j;
        const u1 = 1 << (2 * j);
        const u2 = 2 << (2 * j);
        scaleMinK4(2 * j, src, o + 4, sm);
        let dl = d * sm[0]!;
        let ml = dmin * sm[1]!;
        for (let l = 0; l < 32; l++) {
          const v = (src[q + l]! & 0xf) + (src[o + 16 + l]! & u1 ? 16 : 0);
          sum += fr(dl * v - ml) * x[xo + l]!;
        }
        scaleMinK4(2 * j + 1, src, o + 4, sm);
        dl = d * sm[0]!;
        ml = dmin * sm[1]!;
        for (let l = 0; l < 32; l++) {
          const v = (src[q + l]! >>> 4) + (src[o + 16 + l]! & u2 ? 16 : 0);
          sum += fr(dl * v - ml) * x[xo + 32 + l]!;
        }
      }
    }
    return sum;
  },
  Q6_K(src, o, x, xi, nBlocks) {
    let sum = 0;
    for (let b = 0; b < nBlocks; b++, o += 210, xi += 256) {
      const d = f16At(src, o + 208);
      for (let half = 0; half < 2; half++) {
        const ql = o + 64 * half;
        const qh = o + 128 + 32 * half;
        const sc = o + 192 + 8 * half;
        const xo = xi + 128 * half;
        // The 128 weights of a half in output order: quarter k uses scale sc[l / 16 + 2k].
        for (let k = 0; k < 4; k++) {
          const lo = ql + (k & 1) * 32;
          const shift = 4 * (k >>> 1);
          for (let l = 0; l < 32; l++) {
            const dl = d * ((src[sc + (l >>> 4) + 2 * k]! << 24) >> 24);
            const q =
              (((src[lo + l]! >>> shift) & 0xf) | (((src[qh + l]! >>> (2 * k)) & 3) << 4)) - 32;
            sum += fr(dl * q) * x[xo + 32 * k + l]!;
          }
        }
      }
    }
    return sum;
  },
};

/**
 * `Σ w[i] · x[xOffset + i]` over the `n` weights of one row of `type` stored at byte
 * `srcOffset` of `src` (a whole number of blocks), accumulated in double precision.
 *
 * @throws {QuantizerError} `UNSUPPORTED_GGML_TYPE`, `BAD_SHAPE` (n not whole blocks),
 * `LENGTH_MISMATCH` (either range outside its array).
 */
export function ggmlDot(
  type: GgmlBlockType | number,
  src: Uint8Array,
  srcOffset: number,
  x: Float32Array,
  xOffset: number,
  n: number,
): number {
  const f = ggmlBlockFormat(type);
  checkBlocks(f, n);
  checkSpan(`${f.name} row`, srcOffset, (n / f.blockSize) * f.bytesPerBlock, src.length);
  checkSpan(`${f.name} vector`, xOffset, n, x.length);
  const bs = f.blockSize;
  const fused = FUSED[f.name];
  if (fused) return fused(src, srcOffset, x, xOffset, n / bs);
  let sum = 0;
  for (let b = 0, o = srcOffset, xi = xOffset; b < n / bs; b++, o += f.bytesPerBlock, xi += bs) {
    f.dequantize(src, o, scratch, 0, bs);
    for (let i = 0; i < bs; i++) sum += scratch[i]! * x[xi + i]!;
  }
  return sum;
}

/**
 * `out[outOffset + r] = Σ_c W[r, c] · x[xOffset + c]` for a `rows × cols` matrix of `type`
 * stored row after row from byte `srcOffset` (GGUF's layout: `cols` is the tensor's first,
 * contiguous dimension, a whole number of blocks), each sum in double precision, then stored
 * as f32.
 *
 * @throws {QuantizerError} as {@link ggmlDot}, and `BAD_SHAPE` for a non-integer `rows`.
 */
export function ggmlMatVec(
  type: GgmlBlockType | number,
  src: Uint8Array,
  srcOffset: number,
  rows: number,
  cols: number,
  x: Float32Array,
  xOffset: number,
  out: Float32Array,
  outOffset: number,
): void {
  const f = ggmlBlockFormat(type);
  checkBlocks(f, cols);
  if (!Number.isInteger(rows) || rows < 0) {
    throw new QuantizerError('BAD_SHAPE', `${f.name} matrix: rows must be a count, got ${rows}`);
  }
  const rowBytes = (cols / f.blockSize) * f.bytesPerBlock;
  checkSpan(`${f.name} matrix`, srcOffset, rows * rowBytes, src.length);
  checkSpan(`${f.name} vector`, xOffset, cols, x.length);
  checkSpan(`${f.name} output`, outOffset, rows, out.length);
  for (let r = 0; r < rows; r++) {
    out[outOffset + r] = ggmlDot(f.name, src, srcOffset + r * rowBytes, x, xOffset, cols);
  }
}

function checkSpan(what: string, offset: number, count: number, length: number): void {
  if (!Number.isInteger(offset) || offset < 0 || offset + count > length) {
    throw new QuantizerError(
      'LENGTH_MISMATCH',
      `${what}: [${offset}, ${offset + count}) is outside its ${length} elements`,
    );
  }
}
