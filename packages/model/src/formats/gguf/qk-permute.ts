/**
 * llama.cpp's converter reorders the rows of `q_proj` / `k_proj` within each head
 * (`reshape(heads, 2, d/2, in).swapaxes(1, 2)`) because llama.cpp rotates interleaved pairs;
 * Kvasir rotates halves (Hugging Face's order). Canonical row `s × d/2 + i` of a head is
 * stored as row `2i + s`. These two functions are that move and its inverse.
 */

function moveHeadRows<T extends Float32Array | Uint8Array>(
  src: T,
  out: T,
  rowLen: number,
  headRows: number,
  toGguf: boolean,
): T {
  const headLen = headRows * rowLen;
  const half = headRows / 2;
  for (let h = 0; h < src.length; h += headLen) {
    for (let s = 0; s < 2; s++) {
      for (let i = 0; i < half; i++) {
        const canonical = h + (s * half + i) * rowLen;
        const stored = h + (2 * i + s) * rowLen;
        const [from, to] = toGguf ? [canonical, stored] : [stored, canonical];
        out.set(src.subarray(from, from + rowLen), to);
      }
    }
  }
  return out;
}

/**
 * Applies llama.cpp's Q/K row permutation (HF rotate-half order → GGUF interleaved order) to a
 * row-major tensor of `rows × rowLen` values grouped in heads of `headDim` rows: canonical row
 * `s × headDim/2 + i` of each head moves to row `2i + s`.
 */
export function permuteQkRows(values: Float32Array, rows: number, headDim: number): Float32Array {
  return moveHeadRows(values, new Float32Array(values.length), values.length / rows, headDim, true);
}

/**
 * Undoes {@link permuteQkRows} on stored bytes: `stored` holds whole heads of `headRows` rows
 * of `rowBytes` bytes each (any element type, quantized blocks included, since rows move whole).
 */
export function unpermuteQkRows(
  stored: Uint8Array,
  rowBytes: number,
  headRows: number,
): Uint8Array {
  return moveHeadRows(stored, new Uint8Array(stored.byteLength), rowBytes, headRows, false);
}
