import type { WeightAllocator } from '../../execution/weights.js';
import {
  isGgmlFormat,
  type StoredFormat,
  type StoredWeight,
  weightRowBytes,
  weightWords,
} from '../../kernels/weight-format.js';
import type { WasmArena } from './wasm-arena.js';
import { WeightCode } from './wasm-program.js';

/**
 * A weight matrix in wasm memory, at byte offsets: the words of a `PackedWeight`, or a GGUF
 * tensor's GGML blocks as the file has them (row after row), which the kernels multiply in place.
 */
export interface WasmWeight {
  readonly format: StoredFormat;
  readonly rows: number;
  readonly cols: number;
  /** Byte offset of the packed rows (or blocks). */
  readonly data: number;
  /** Byte offset of the int8 group scales (0 for the other formats). */
  readonly scales: number;
  readonly groupSize: number;
}

/** The matmul/embedding record fields of a weight: format code, scales, group size. */
export function weightArgs(w: WasmWeight): { code: number; scales: number; gs: number } {
  return { code: WeightCode[w.format], scales: w.scales, gs: w.groupSize || 1 };
}

/**
 * A `WeightAllocator` that streams packed rows (or GGML blocks) straight into wasm memory: the
 * loader's bounded row batches are the only host copies, so no second full copy of the weights
 * lives on the JS heap, and block weights take their file's bytes.
 */
export function wasmAllocator(arena: WasmArena): WeightAllocator<WasmWeight, StoredFormat> {
  return (name, rows, cols, format, groupSize) => {
    const data = arena.alloc(weightWords(format, rows, cols) * 4, `weight ${name}`);
    const rowBytes = weightRowBytes(format, cols);
    const gpr = format === 'int8' ? cols / groupSize : 0;
    const scales = gpr > 0 ? arena.alloc(rows * gpr * 4, `weight ${name} scales`) : 0;
    return {
      write(rowStart, d, sc) {
        // GGML rows are whole blocks, not whole words: their batches start at a byte offset
        // (a multiple of 4, see WeightSink) and may end in padding the next batch overwrites.
        arena.u32(data + rowStart * rowBytes, d.length).set(d);
        if (format === 'Q8_0') clampQ8Codes(arena.u8(data + rowStart * rowBytes, d.length * 4));
        if (sc && scales) arena.f32(scales + rowStart * gpr * 4, sc.length).set(sc);
      },
      finish: () => ({
        format,
        rows,
        cols,
        data,
        scales,
        groupSize: format === 'int8' ? groupSize : 0,
      }),
    };
  };
}

/**
 * Q8_0 codes of -128 read as -127 (ggml's quantizer writes none: its codes are round(x / d) with
 * d = max|x| / 127). The relaxed kernels' int8 dot takes |code| as its 7-bit operand, so both
 * builds read the same weights. `bytes` starts at a block; a partial last block is fine.
 */
function clampQ8Codes(bytes: Uint8Array): void {
  for (let b = 0; b + 2 < bytes.length; b += 34) {
    const end = Math.min(b + 34, bytes.length);
    for (let i = b + 2; i < end; i++) if (bytes[i] === 0x80) bytes[i] = 0x81;
  }
}

/** Copies a host weight (dense or GGML blocks) into wasm memory (tests, benchmarks). */
export function uploadWeight(arena: WasmArena, w: StoredWeight): WasmWeight {
  const sink = wasmAllocator(arena)('upload', w.rows, w.cols, w.format, w.groupSize || 32);
  sink.write(0, w.data, w.scales);
  return sink.finish();
}

/** Bytes a weight's packed rows (or blocks) and scales occupy. */
export function weightBytes(w: WasmWeight | StoredWeight): number {
  if (isGgmlFormat(w.format)) return w.rows * weightRowBytes(w.format, w.cols);
  const rowBytes = weightRowBytes(w.format, w.cols);
  const scaleBytes = w.format === 'int8' ? (w.cols / w.groupSize) * 4 : 0;
  return w.rows * (rowBytes + scaleBytes);
}
