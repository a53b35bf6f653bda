import { GGML_TYPE_IDS, ggmlTypeName, isGgmlBlockType } from '@kvasir/quantizer/ggml';
import type { TensorDtype } from '../dtype.js';

/** The ggml type id of a tensor dtype (`GGML_TYPE_*` of ggml.h). */
export function ggmlTypeId(dtype: TensorDtype): number {
  return GGML_TYPE_IDS[dtype];
}

/** The tensor dtype of ggml type `id`, or undefined for a type this package cannot read. */
export function dtypeOfGgmlType(id: number): TensorDtype | undefined {
  if (id === GGML_TYPE_IDS.F32) return 'F32';
  if (id === GGML_TYPE_IDS.F16) return 'F16';
  if (id === GGML_TYPE_IDS.BF16) return 'BF16';
  return isGgmlBlockType(id) ? (ggmlTypeName(id) as TensorDtype) : undefined;
}

/** ggml's name of type `id` (`'IQ2_XXS'`), or `'unknown type <id>'`, for error messages. */
export { ggmlTypeName };
