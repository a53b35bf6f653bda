// Matrix-vector products straight from GGML blocks: each row is decoded one block at a time
// into a 256-float scratch (no whole-tensor dequantization, no allocation per call), so a
// quantized weight matrix costs its GGUF bytes in memory. The result equals decoding the row
// with the block format's `dequantize` and summing `w[i] · x[i]` in order in double precision,
// bit for bit.

import { QuantizerError } from '../errors.js';
import { checkBlocks } from './block-io.js';
import { type GgmlBlockType, ggmlBlockFormat } from './types.js';

const scratch = new Float32Array(256);

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
