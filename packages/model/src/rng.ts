import { ModelError } from './errors.js';

function splitmix32(state: number): [number, number] {
  state = (state + 0x9e3779b9) | 0;
  let z = state;
  z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
  z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
  return [state, (z ^ (z >>> 16)) >>> 0];
}

/**
 * A small, fast, seedable PRNG (xoshiro128**), one per request so that a request's samples
 * depend only on its own seed, never on what else is in the batch. Not for cryptography.
 *
 * @example
 * ```ts
 * const rng = new Rng(42);
 * const u = rng.nextFloat(); // same value for every Rng(42)
 * ```
 */
export class Rng {
  private s0: number;
  private s1: number;
  private s2: number;
  private s3: number;

  /**
   * @param seed - any safe integer (negative allowed); both 32-bit halves are mixed in.
   * @throws {@link ModelError} `INVALID_ARGUMENT` for a non-integer or unsafe seed.
   */
  constructor(seed: number) {
    if (!Number.isSafeInteger(seed)) {
      throw new ModelError('INVALID_ARGUMENT', `seed must be a safe integer, got ${seed}`);
    }
    const lo = seed | 0;
    const hi = Math.floor(seed / 0x100000000) | 0;
    let st = lo ^ Math.imul(hi, 0x27d4eb2f);
    let v: number;
    [st, v] = splitmix32(st);
    this.s0 = v;
    [st, v] = splitmix32(st);
    this.s1 = v;
    [st, v] = splitmix32(st ^ hi);
    this.s2 = v;
    [st, v] = splitmix32(st);
    this.s3 = v;
    if ((this.s0 | this.s1 | this.s2 | this.s3) === 0) this.s0 = 1;
  }

  /** Next uniformly distributed unsigned 32-bit integer. */
  nextUint32(): number {
    const result = Math.imul(rotl(Math.imul(this.s1, 5), 7), 9) >>> 0;
    const t = this.s1 << 9;
    this.s2 ^= this.s0;
    this.s3 ^= this.s1;
    this.s1 ^= this.s2;
    this.s0 ^= this.s3;
    this.s2 ^= t;
    this.s3 = rotl(this.s3, 11);
    return result;
  }

  /** Next float uniformly distributed in [0, 1), with 53 random bits. */
  nextFloat(): number {
    const hi = this.nextUint32() >>> 5;
    const lo = this.nextUint32() >>> 6;
    return (hi * 67108864 + lo) / 9007199254740992;
  }
}

function rotl(x: number, k: number): number {
  return (x << k) | (x >>> (32 - k));
}
