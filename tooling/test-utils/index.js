// Test and benchmark helpers shared by every package of the workspace. Never published: a
// package's tests and bench scripts take it as a devDependency.

/**
 * mulberry32: a small seeded generator of floats uniform in [0, 1). Same seed, same sequence,
 * on every platform. Not for cryptography, and not the sampler's generator (that one is
 * `Rng` in `@kvasir/model`, a per-request xoshiro128**).
 * @param {number} seed
 * @returns {() => number}
 */
export function seededRandom(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * `n` floats uniform in [-scale, scale).
 * @param {() => number} random
 * @param {number} n
 * @param {number} [scale]
 * @returns {Float32Array}
 */
export function randomFloats(random, n, scale = 1) {
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = (random() * 2 - 1) * scale;
  return out;
}

/**
 * A standard normal sample (Box–Muller).
 * @param {() => number} random
 * @returns {number}
 */
export function normal(random) {
  const u = Math.max(random(), 1e-12);
  const v = random();
  return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * v);
}
