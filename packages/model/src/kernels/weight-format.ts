import { f16BitsToF32, f32ToF16Bits } from '@kvasir/quantizer';
import { GGML_BLOCK_FORMATS, type GgmlBlockType, ggmlDot } from '@kvasir/quantizer/ggml';

/**
 * How a dense weight matrix is stored in GPU (and CPU-backend) memory.
 *
 * - `f32`: one float per 32-bit word.
 * - `f16`: two halves per word, element 2i in the low half (WGSL `unpack2x16float`); no
 *   `shader-f16` needed.
 * - `int8`: four signed bytes per word, element 4i in the lowest byte, plus one f32 scale per
 *   group of `groupSize` consecutive input columns of a row (symmetric, absmax / 127).
 */
export type WeightFormat = 'f32' | 'f16' | 'int8';

/** Default int8 group size along the input dimension. */
export const DEFAULT_INT8_GROUP_SIZE = 32;

/**
 * A dense weight `W[rows][cols]` (a Hugging Face `Linear` weight: rows = out features,
 * cols = in features) packed in one of the {@link WeightFormat}s.
 */
export interface PackedWeight {
  readonly format: WeightFormat;
  readonly rows: number;
  readonly cols: number;
  /** Packed words, row-major: `rows * wordsPerRow(format, cols)`. */
  readonly data: Uint32Array;
  /** int8 only: `rows * cols / groupSize` scales. */
  readonly scales: Float32Array | undefined;
  /** int8 group size (0 for float formats). */
  readonly groupSize: number;
}

/**
 * A weight matrix kept in a GGUF file's own block format (`Q4_K`, `Q6_K`, `Q8_0`, ...): the
 * file's bytes unchanged, row after row (a row is `cols / blockSize` blocks, GGUF's layout),
 * in 32-bit words with the last word zero-padded and one spare zero word after it, so that a
 * kernel reading an unaligned 32-bit value at the end stays in bounds. Backends decode blocks
 * as they multiply: memory and bytes read per step are the file's.
 */
export interface GgmlWeight {
  readonly format: GgmlBlockType;
  readonly rows: number;
  readonly cols: number;
  /** The blocks, `rows * ggmlRowBytes(format, cols)` bytes, then padding (see above). */
  readonly data: Uint32Array;
  readonly scales: undefined;
  readonly groupSize: 0;
}

/** How a stored weight matrix is laid out: a dense {@link WeightFormat} or GGML blocks. */
export type StoredFormat = WeightFormat | GgmlBlockType;
/** A weight matrix as a backend holds it. */
export type StoredWeight = PackedWeight | GgmlWeight;

/** Whether `format` keeps GGML blocks (as opposed to one of the dense formats). */
export function isGgmlFormat(format: StoredFormat): format is GgmlBlockType {
  return format !== 'f32' && format !== 'f16' && format !== 'int8';
}

/** Whether `w` holds GGML blocks. */
export function isGgmlWeight(w: StoredWeight): w is GgmlWeight {
  return isGgmlFormat(w.format);
}

/** Bytes of one stored row of `cols` elements (a whole number of blocks for GGML formats). */
export function weightRowBytes(format: StoredFormat, cols: number): number {
  if (!isGgmlFormat(format)) return wordsPerRow(format, cols) * 4;
  const f = GGML_BLOCK_FORMATS[format];
  return (cols / f.blockSize) * f.bytesPerBlock;
}

/** 32-bit words a `rows × cols` matrix takes in `format` (GGML padding included). */
export function weightWords(format: StoredFormat, rows: number, cols: number): number {
  if (!isGgmlFormat(format)) return rows * wordsPerRow(format, cols);
  return Math.ceil((rows * weightRowBytes(format, cols)) / 4) + 1;
}

/** The bytes of a stored weight's words. */
export function weightBytesView(w: StoredWeight): Uint8Array {
  return new Uint8Array(w.data.buffer, w.data.byteOffset, w.data.byteLength);
}

/** 32-bit words per packed row of `cols` elements. */
export function wordsPerRow(format: WeightFormat, cols: number): number {
  if (format === 'f32') return cols;
  if (format === 'f16') return cols / 2;
  return cols / 4;
}

/**
 * Whether `cols` (and `groupSize` for int8) can be packed in `format`: the GPU kernels read
 * four elements at a time, so `cols` must be a multiple of 4, and int8 groups must be
 * multiples of 4 dividing `cols`.
 */
export function packable(format: WeightFormat, cols: number, groupSize: number): boolean {
  if (cols % 4 !== 0) return false;
  if (format !== 'int8') return true;
  return groupSize > 0 && groupSize % 4 === 0 && cols % groupSize === 0;
}

/**
 * Packs `rowCount` rows of `cols` f32 elements. Rows are independent, so a large matrix can be
 * packed (and uploaded) a chunk of rows at a time.
 */
export function packRows(
  src: Float32Array,
  rowCount: number,
  cols: number,
  format: WeightFormat,
  groupSize = DEFAULT_INT8_GROUP_SIZE,
): { data: Uint32Array; scales: Float32Array | undefined } {
  const wpr = wordsPerRow(format, cols);
  const data = new Uint32Array(rowCount * wpr);
  if (format === 'f32') {
    data.set(new Uint32Array(src.buffer, src.byteOffset, rowCount * cols));
    return { data, scales: undefined };
  }
  if (format === 'f16') {
    const n = rowCount * cols;
    for (let i = 0, w = 0; i < n; i += 2, w++) {
      data[w] = (f32ToF16Bits(src[i] as number) | (f32ToF16Bits(src[i + 1] as number) << 16)) >>> 0;
    }
    return { data, scales: undefined };
  }
  const groupsPerRow = cols / groupSize;
  const scales = new Float32Array(rowCount * groupsPerRow);
  for (let r = 0; r < rowCount; r++) {
    for (let g = 0; g < groupsPerRow; g++) {
      const base = r * cols + g * groupSize;
      let absmax = 0;
      for (let i = 0; i < groupSize; i++) {
        const a = Math.abs(src[base + i] as number);
        if (a > absmax) absmax = a;
      }
      // Math.fround: the scale the GPU sees is an f32, so quantize against exactly that value.
      const scale = Math.fround(absmax / 127);
      scales[r * groupsPerRow + g] = scale;
      const inv = scale === 0 ? 0 : 1 / scale;
      for (let i = 0; i < groupSize; i += 4) {
        let word = 0;
        for (let j = 0; j < 4; j++) {
          let q = Math.round((src[base + i + j] as number) * inv);
          if (q > 127) q = 127;
          else if (q < -127) q = -127;
          word |= (q & 0xff) << (8 * j);
        }
        data[(base + i) / 4] = word >>> 0;
      }
    }
  }
  return { data, scales };
}

/** Packs a whole matrix (see {@link packRows}). */
export function packWeight(
  src: Float32Array,
  rows: number,
  cols: number,
  format: WeightFormat,
  groupSize = DEFAULT_INT8_GROUP_SIZE,
): PackedWeight {
  const { data, scales } = packRows(src, rows, cols, format, groupSize);
  return { format, rows, cols, data, scales, groupSize: format === 'int8' ? groupSize : 0 };
}

/**
 * Decodes row `row` of a stored weight into `out` (length `cols`), exactly as the GPU does
 * (GGML blocks: ggml's dequantization, bit-exact).
 */
export function unpackRow(w: StoredWeight, row: number, out: Float32Array): Float32Array {
  const { cols, data } = w;
  if (isGgmlFormat(w.format)) {
    const rowBytes = weightRowBytes(w.format, cols);
    GGML_BLOCK_FORMATS[w.format].dequantize(weightBytesView(w), row * rowBytes, out, 0, cols);
    return out;
  }
  if (w.format === 'f32') {
    out.set(new Float32Array(data.buffer, data.byteOffset + row * cols * 4, cols));
    return out;
  }
  if (w.format === 'f16') {
    const base = (row * cols) / 2;
    for (let i = 0; i < cols; i += 2) {
      const word = data[base + i / 2] as number;
      out[i] = f16BitsToF32(word & 0xffff);
      out[i + 1] = f16BitsToF32(word >>> 16);
    }
    return out;
  }
  const scales = w.scales as Float32Array;
  const gpr = cols / (w.groupSize as number);
  const base = (row * cols) / 4;
  for (let i = 0; i < cols; i += 4) {
    const word = data[base + i / 4] as number;
    const s = scales[row * gpr + Math.floor(i / (w.groupSize as number))] as number;
    for (let j = 0; j < 4; j++)
      out[i + j] = Math.fround((((word << (24 - 8 * j)) >> 24) as number) * s);
  }
  return out;
}

/**
 * `Σ_c W[row, c] · x[xOffset + c]` for a GGML-block weight, a block decoded at a time (the
 * products of {@link unpackRow}'s values, summed in order in double precision).
 */
export function ggmlRowDot(
  w: GgmlWeight,
  bytes: Uint8Array,
  row: number,
  x: Float32Array,
  xOffset: number,
): number {
  return ggmlDot(w.format, bytes, row * weightRowBytes(w.format, w.cols), x, xOffset, w.cols);
}

/** Decodes a whole stored weight to f32 (tests and small matrices). */
export function unpackWeight(w: StoredWeight): Float32Array {
  const out = new Float32Array(w.rows * w.cols);
  const row = new Float32Array(w.cols);
  for (let r = 0; r < w.rows; r++) out.set(unpackRow(w, r, row), r * w.cols);
  return out;
}
