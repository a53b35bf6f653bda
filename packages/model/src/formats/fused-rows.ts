import { ModelError } from '../errors.js';
import { basename } from './base-name.js';
import type { TensorInfo, TensorLocation } from './checkpoint-reader.js';
import type { TensorDtype } from './dtype.js';

/** One part of a fused matrix: its canonical name and its rows. */
export interface FusedPart {
  readonly name: string;
  readonly rows: number;
}

/**
 * A fused 2-D tensor (`[rows, cols]`, rows of the parts stacked in order: Phi-3's QKV and
 * gate/up) as its parts, each `[part rows, cols]` at its slice of the file: a row of any dtype
 * (GGML blocks included) is whole bytes, so each part is a contiguous run of whole rows that
 * every backend loads as any other matrix. The fused name is not added.
 *
 * @throws {@link ModelError} `SHAPE_MISMATCH` naming the tensor when its rows are not the
 *   parts' sum or its bytes not whole rows.
 */
export function addFusedRows(
  fused: {
    readonly name: string;
    readonly dtype: TensorDtype;
    readonly shape: readonly number[];
    readonly byteLength: number;
  },
  at: TensorLocation,
  parts: readonly FusedPart[],
  tensors: Map<string, TensorInfo>,
  locations: Map<string, TensorLocation>,
): void {
  const [rows, cols] = fused.shape as [number, number];
  const want = parts.reduce((a, p) => a + p.rows, 0);
  if (fused.shape.length !== 2 || rows !== want || fused.byteLength % rows !== 0) {
    throw new ModelError(
      'SHAPE_MISMATCH',
      `${basename(at.file)}: tensor "${fused.name}" has shape [${fused.shape.join(', ')}]; it must stack ${parts.map((p) => `${p.name} (${p.rows} rows)`).join(', ')}`,
      { details: { file: at.file, tensor: fused.name } },
    );
  }
  const rowBytes = fused.byteLength / rows;
  let row = 0;
  for (const p of parts) {
    tensors.set(p.name, {
      name: p.name,
      dtype: fused.dtype,
      shape: [p.rows, cols],
      byteLength: p.rows * rowBytes,
    });
    locations.set(p.name, { file: at.file, offset: at.offset + row * rowBytes });
    row += p.rows;
  }
}
