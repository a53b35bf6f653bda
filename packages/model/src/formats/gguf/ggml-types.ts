import type { TensorDtype } from '../dtype.js';

/** ggml tensor type ids this package reads and writes. */
export const GGML_TYPE_ID: Record<TensorDtype, number> = { F32: 0, F16: 1, Q8_0: 8, BF16: 30 };
export const GGML_TYPE_BY_ID = new Map<number, TensorDtype>([
  [0, 'F32'],
  [1, 'F16'],
  [8, 'Q8_0'],
  [30, 'BF16'],
]);
/** Names of ggml types we refuse, for clear messages. */
export const GGML_TYPE_NAMES: Record<number, string> = {
  2: 'Q4_0',
  3: 'Q4_1',
  6: 'Q5_0',
  7: 'Q5_1',
  9: 'Q8_1',
  10: 'Q2_K',
  11: 'Q3_K',
  12: 'Q4_K',
  13: 'Q5_K',
  14: 'Q6_K',
  15: 'Q8_K',
  16: 'IQ2_XXS',
  17: 'IQ2_XS',
  18: 'IQ3_XXS',
  19: 'IQ1_S',
  20: 'IQ4_NL',
  21: 'IQ3_S',
  22: 'IQ2_S',
  23: 'IQ4_XS',
  24: 'I8',
  25: 'I16',
  26: 'I32',
  27: 'I64',
  28: 'F64',
  29: 'IQ1_M',
};
