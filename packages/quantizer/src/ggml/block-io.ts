// Shared by the block codecs: argument checks (once per call, never per block) and the
// little-endian field reads every GGML block struct needs.

import { QuantizerError } from '../errors.js';
import { f16BitsToF32 } from '../ieee-half.js';

/** Throws BAD_SHAPE unless `n` is a non-negative whole number of blocks of `blockSize`. */
export function checkBlocks(
  f: { readonly name: string; readonly blockSize: number },
  n: number,
): void {
  if (!Number.isInteger(n) || n < 0 || n % f.blockSize !== 0) {
    throw new QuantizerError(
      'BAD_SHAPE',
      `${f.name} stores weights in blocks of ${f.blockSize}; ${n} is not a whole number of blocks`,
    );
  }
}

function checkRange(what: string, offset: number, count: number, length: number): void {
  if (!Number.isInteger(offset) || offset < 0 || offset + count > length) {
    throw new QuantizerError(
      'LENGTH_MISMATCH',
      `${what}: [${offset}, ${offset + count}) is outside its ${length} elements`,
    );
  }
}

/** Checks a block codec call: whole blocks, and both ranges inside their arrays. */
export function checkBlockCall(
  name: string,
  blockSize: number,
  bytesPerBlock: number,
  bytes: Uint8Array,
  byteOffset: number,
  values: Float32Array,
  valueOffset: number,
  n: number,
): void {
  checkBlocks({ name, blockSize }, n);
  checkRange(`${name} blocks`, byteOffset, (n / blockSize) * bytesPerBlock, bytes.length);
  checkRange(`${name} values`, valueOffset, n, values.length);
}

/** The f32 value of the little-endian f16 at `src[o]`, `src[o + 1]`. */
export function f16At(src: Uint8Array, o: number): number {
  return f16BitsToF32(src[o]! | (src[o + 1]! << 8));
}

/** Writes f16 bits `h` little-endian at `dst[o]`. */
export function putF16(dst: Uint8Array, o: number, h: number): void {
  dst[o] = h & 0xff;
  dst[o + 1] = h >>> 8;
}

const nf = new Float32Array(1);
const ni = new Int32Array(nf.buffer);

/**
 * ggml's `nearest_int`: `fval + 1.5·2^23` in f32 rounds to an integer half to even, read back
 * from the mantissa bits. Exact for |fval| < 2^22 (ggml asserts that in debug builds only), and
 * reproduces release ggml's wrapped result beyond it, where NaN gives 0.
 */
export function nearestInt(fval: number): number {
  nf[0] = Math.fround(fval) + 12582912;
  return (ni[0]! & 0x007fffff) - 0x00400000;
}

/** C's `roundf`: half away from zero. */
export function roundf(x: number): number {
  return x < 0 ? -Math.floor(-x + 0.5) : Math.floor(x + 0.5);
}
