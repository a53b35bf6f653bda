// Test-only: llama.cpp's conventions written as its Python converter writes them, as an
// independent reference.

/** llama.cpp's permute as numpy writes it: w.reshape(n_head, 2, D/2, cols).swapaxes(1, 2). */
export function llamaCppPermute(w: Float32Array, rows: number, nHead: number): Float32Array {
  const cols = w.length / rows;
  const d2 = rows / nHead / 2;
  const out = new Float32Array(w.length);
  // out[h, i, s, c] = w[h, s, i, c]
  for (let h = 0; h < nHead; h++)
    for (let i = 0; i < d2; i++)
      for (let s = 0; s < 2; s++)
        for (let c = 0; c < cols; c++)
          out[((h * d2 + i) * 2 + s) * cols + c] = w[((h * 2 + s) * d2 + i) * cols + c]!;
  return out;
}
