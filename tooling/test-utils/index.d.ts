/** A seeded generator of floats uniform in [0, 1). */
export type SeededRandom = () => number;

/**
 * mulberry32: a small seeded generator of floats uniform in [0, 1). Same seed, same sequence,
 * on every platform. Not for cryptography, and not the sampler's generator.
 */
export function seededRandom(seed: number): SeededRandom;

/** `n` floats uniform in [-scale, scale). */
export function randomFloats(random: SeededRandom, n: number, scale?: number): Float32Array;

/** A standard normal sample (Box–Muller). */
export function normal(random: SeededRandom): number;

/**
 * Random JSON schemas of the kinds structured-output requests send (objects with required and
 * optional properties, bounded arrays, enums, consts, bounded integers, numbers, strings with
 * length bounds or a pattern, `anyOf`), always an object schema at the top. fast-check is passed
 * in: this package depends on nothing.
 */
export function jsonSchemaArbitrary(
  fc: typeof import('fast-check'),
  options?: { maxDepth?: number },
): import('fast-check').Arbitrary<Record<string, unknown>>;
