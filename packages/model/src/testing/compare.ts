// Test-only: comparing float arrays. Seeded random data comes from @kvasir/test-utils.

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
