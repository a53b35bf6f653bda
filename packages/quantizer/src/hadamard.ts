// Walsh–Hadamard rotation along the head dimension (QuaRot, QuIP#): an outlier channel is spread
// evenly over the `size` channels of its run, so a group's range, and with it the quantization
// step, no longer follows the one large channel. It needs no calibration and no per-layer
// parameters: dot products are preserved up to the known factor `size`, which decoding removes.
//
// The transform is unnormalized (only additions and subtractions), every sum rounded to f32 in a
// fixed butterfly order, so the WGSL twin produces the same bits (no multiply for a compiler to
// fuse), and the 1/size that undoes it is a power of two (exact).

import { QuantizerError } from './errors.js';

/** Run lengths of the rotation (powers of two along the head dimension). */
export type HadamardSize = 8 | 16 | 32 | 64 | 128;

const fround = Math.fround;

/** True for a supported rotation size. */
export function isHadamardSize(n: number): n is HadamardSize {
  return n === 8 || n === 16 || n === 32 || n === 64 || n === 128;
}

/**
 * In place, the unnormalized Walsh–Hadamard transform (Sylvester order,
 * `H[i][j] = (−1)^popcount(i & j)`) of every run of `size` elements of `x[offset .. offset +
 * length)`: stages `h = 1, 2, 4, …` each replace `(a, b)` at distance `h` by `(a + b, a − b)`,
 * rounding to f32. Applying it twice multiplies by `size`.
 *
 * @throws QuantizerError `BAD_GROUP_SIZE` when `size` is not 8, 16, 32, 64 or 128 or `length` is
 * not a multiple of it, `BAD_SHAPE` when the range lies outside `x`.
 */
export function hadamardF32(
  x: Float32Array,
  size: number,
  offset = 0,
  length = x.length - offset,
): void {
  if (!isHadamardSize(size) || length % size !== 0) {
    throw new QuantizerError(
      'BAD_GROUP_SIZE',
      `Hadamard size must be 8, 16, 32, 64 or 128 and divide the length ${length}, got ${size}`,
      { details: { size, length } },
    );
  }
  if (!Number.isInteger(offset) || offset < 0 || offset + length > x.length) {
    throw new QuantizerError(
      'BAD_SHAPE',
      `range [${offset}, ${offset + length}) lies outside an array of ${x.length}`,
      { details: { offset, length, size: x.length } },
    );
  }
  for (let base = offset; base < offset + length; base += size) {
    for (let h = 1; h < size; h <<= 1) {
      for (let i = base; i < base + size; i += 2 * h) {
        for (let j = i; j < i + h; j++) {
          const a = x[j]!;
          const b = x[j + h]!;
          x[j] = fround(a + b);
          x[j + h] = fround(a - b);
        }
      }
    }
  }
}

/**
 * WGSL of the transform on 8 elements held as two `vec4<f32>` (elements 0–3, 4–7), with the
 * same additions in the same order as {@link hadamardF32}, so the bits agree:
 * `kq_fwht4(v) -> vec4<f32>` (the first two stages inside a vector) and
 * `kq_fwht8(a, b) -> array<vec4<f32>, 2>`. Longer runs are built from these by the stages across
 * vectors (`(u, v) → (u + v, u − v)` at distances of 8, 16, … elements).
 */
export function wgslHadamard(): string {
  return `
fn kq_fwht4(v: vec4<f32>) -> vec4<f32> {
  let u = vec4<f32>(v.x + v.y, v.x - v.y, v.z + v.w, v.z - v.w);
  return vec4<f32>(u.x + u.z, u.y + u.w, u.x - u.z, u.y - u.w);
}

fn kq_fwht8(a: vec4<f32>, b: vec4<f32>) -> array<vec4<f32>, 2> {
  let x = kq_fwht4(a);
  let y = kq_fwht4(b);
  return array<vec4<f32>, 2>(x + y, x - y);
}
`;
}
