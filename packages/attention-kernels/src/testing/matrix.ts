/**
 * True under `KVASIR_FULL_MATRIX=1`. On a software adapter every distinct kernel variant (head
 * dim, heads, block size, format, tuning: they are all compiled into the WGSL) is a JIT compile
 * of seconds to minutes on its first dispatch, while the dispatch itself takes milliseconds. So
 * the tests run each kernel, mode and KV format on the smallest shapes that still show each case
 * (GQA, partial blocks, block sizes, head dims whose chunks do not divide), and this flag adds
 * the serving-sized shapes and the cross products back.
 */
export const FULL_MATRIX = process.env.KVASIR_FULL_MATRIX === '1';

/** `ci`, followed by `full` under `KVASIR_FULL_MATRIX=1`. */
export function withFullMatrix<T>(ci: readonly T[], full: readonly T[]): T[] {
  return FULL_MATRIX ? [...ci, ...full] : [...ci];
}
