// Test-only: deterministic random data.

/** mulberry32: a small seeded PRNG returning floats in [0, 1). */
export function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** `n` uniform values in [-scale, scale). */
export function randomF32(n: number, seed: number, scale = 1): Float32Array {
  const r = rng(seed);
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = (r() * 2 - 1) * scale;
  return out;
}

/** Largest |a - b| relative to max(1, max|b|). */
export function maxRelDiff(a: Float32Array, b: Float32Array): number {
  if (a.length !== b.length) throw new Error(`length ${a.length} != ${b.length}`);
  let scale = 1;
  for (const v of b) scale = Math.max(scale, Math.abs(v));
  let d = 0;
  for (let i = 0; i < a.length; i++) {
    const e = Math.abs((a[i] as number) - (b[i] as number));
    if (!(e <= d)) d = Number.isNaN(e) ? Number.POSITIVE_INFINITY : e;
  }
  return d / scale;
}
