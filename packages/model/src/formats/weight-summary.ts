import type { CheckpointReader } from './checkpoint-reader.js';
import type { TensorDtype } from './dtype.js';

/** The tensors of one dtype in a checkpoint. */
export interface WeightTypeCount {
  readonly dtype: TensorDtype;
  readonly tensors: number;
  readonly parameters: number;
  /** Bytes as stored (block scales included). */
  readonly bytes: number;
}

/** What a checkpoint's weights are stored as: per dtype and overall. */
export interface WeightSummary {
  /** One entry per dtype present, most parameters first. */
  readonly types: readonly WeightTypeCount[];
  readonly parameters: number;
  readonly bytes: number;
  /** `8 · bytes / parameters` over every tensor (a Q4_K_M file: about 4.8). */
  readonly bitsPerWeight: number;
}

/**
 * Counts a checkpoint's tensors, parameters and stored bytes per dtype (a GGUF k-quant file
 * mixes several), from the header alone: no tensor data is read.
 */
export function summarizeWeights(reader: CheckpointReader): WeightSummary {
  const by = new Map<TensorDtype, { tensors: number; parameters: number; bytes: number }>();
  let parameters = 0;
  let bytes = 0;
  for (const t of reader.tensors.values()) {
    const n = t.shape.reduce((a, b) => a * b, 1);
    const e = by.get(t.dtype) ?? { tensors: 0, parameters: 0, bytes: 0 };
    e.tensors++;
    e.parameters += n;
    e.bytes += t.byteLength;
    by.set(t.dtype, e);
    parameters += n;
    bytes += t.byteLength;
  }
  const types = [...by]
    .map(([dtype, e]) => ({ dtype, ...e }))
    .sort((a, b) => b.parameters - a.parameters || a.dtype.localeCompare(b.dtype));
  return { types, parameters, bytes, bitsPerWeight: parameters ? (8 * bytes) / parameters : 0 };
}
