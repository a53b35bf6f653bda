import type { WeightAllocator } from '../../execution/weights.js';
import type { PackedWeight, WeightFormat } from '../../kernels/weight-format.js';
import { wordsPerRow } from '../../kernels/weight-format.js';
import type { WasmArena } from './wasm-arena.js';
import { WeightCode } from './wasm-program.js';

/** A packed weight matrix in wasm memory: the same words as a `PackedWeight`, at byte offsets. */
export interface WasmWeight {
  readonly format: WeightFormat;
  readonly rows: number;
  readonly cols: number;
  /** Byte offset of the packed rows. */
  readonly data: number;
  /** Byte offset of the int8 group scales (0 for float formats). */
  readonly scales: number;
  readonly groupSize: number;
}

/** The matmul/embedding record fields of a weight: format code, scales, group size. */
export function weightArgs(w: WasmWeight): { code: number; scales: number; gs: number } {
  return { code: WeightCode[w.format], scales: w.scales, gs: w.groupSize || 1 };
}

/**
 * A `WeightAllocator` that streams packed rows straight into wasm memory: the loader's
 * bounded row batches are the only host copies, so no second full copy of the weights lives
 * on the JS heap.
 */
export function wasmAllocator(arena: WasmArena): WeightAllocator<WasmWeight> {
  return (name, rows, cols, format, groupSize) => {
    const wpr = wordsPerRow(format, cols);
    const data = arena.alloc(rows * wpr * 4, `weight ${name}`);
    const gpr = format === 'int8' ? cols / groupSize : 0;
    const scales = gpr > 0 ? arena.alloc(rows * gpr * 4, `weight ${name} scales`) : 0;
    return {
      write(rowStart, d, sc) {
        arena.u32(data + rowStart * wpr * 4, d.length).set(d);
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

/** Copies a host `PackedWeight` into wasm memory (tests, benchmarks). */
export function uploadWeight(arena: WasmArena, w: PackedWeight): WasmWeight {
  const sink = wasmAllocator(arena)('upload', w.rows, w.cols, w.format, w.groupSize || 32);
  sink.write(0, w.data, w.scales);
  return sink.finish();
}

/** Bytes a weight's packed rows and scales occupy. */
export function weightBytes(w: WasmWeight | PackedWeight): number {
  const rowBytes = wordsPerRow(w.format, w.cols) * 4;
  const scaleBytes = w.format === 'int8' ? (w.cols / w.groupSize) * 4 : 0;
  return w.rows * (rowBytes + scaleBytes);
}
