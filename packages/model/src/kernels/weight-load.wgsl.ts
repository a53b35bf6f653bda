import { wgslGgmlLoad4 } from '@kvasir/quantizer/ggml';
import { isGgmlFormat, type StoredFormat } from './weight-format.js';

/**
 * WGSL declarations of a packed weight (`w`, and `wScales` for int8) and `loadW(row, k4)`,
 * which returns elements `4*k4 .. 4*k4+3` of row `row` as f32. `K4` (packed quads per row)
 * must be a module constant. A GGML block weight is the file's bytes as `array<u32>`, its
 * blocks decoded four weights at a time by `@kvasir/quantizer/ggml`'s `wgslGgmlLoad4`
 * (bit-exact with the CPU's dequantization).
 */
export function weightLoadWgsl(
  format: StoredFormat,
  wBinding: number,
  scaleBinding: number,
  groupSize: number,
  cols: number,
): string {
  if (isGgmlFormat(format)) {
    return /* wgsl */ `
@group(0) @binding(${wBinding}) var<storage, read> w: array<u32>;
${wgslGgmlLoad4(format, cols, { buffer: 'w', prefix: 'wq' })}
fn loadW(row: u32, k4: u32) -> vec4<f32> { return wq_load4(row, k4); }
`;
  }
  if (format === 'f32') {
    return /* wgsl */ `
@group(0) @binding(${wBinding}) var<storage, read> w: array<vec4<f32>>;
fn loadW(row: u32, k4: u32) -> vec4<f32> { return w[row * K4 + k4]; }
`;
  }
  if (format === 'f16') {
    return /* wgsl */ `
@group(0) @binding(${wBinding}) var<storage, read> w: array<vec2<u32>>;
fn loadW(row: u32, k4: u32) -> vec4<f32> {
  let p = w[row * K4 + k4];
  let h = vec4<u32>(p.x & 0xffffu, p.x >> 16u, p.y & 0xffffu, p.y >> 16u);
  // Exact for every finite half (subnormals included): shift the exponent and mantissa into
  // f32 position, rebias with an exact multiply by 2^112, restore the sign. Integer and float
  // vector ops, which software adapters run much faster than unpack2x16float. (A device that
  // flushes subnormals turns half subnormals, below 6.1e-5, into 0: harmless for weights.)
  let mag = bitcast<vec4<f32>>((h & vec4<u32>(0x7fffu)) << vec4<u32>(13u)) * 5.192296858534828e33;
  return bitcast<vec4<f32>>(bitcast<vec4<u32>>(mag) | ((h & vec4<u32>(0x8000u)) << vec4<u32>(16u)));
}
`;
  }
  return /* wgsl */ `
@group(0) @binding(${wBinding}) var<storage, read> w: array<u32>;
@group(0) @binding(${scaleBinding}) var<storage, read> wScales: array<f32>;
const GROUPS_PER_ROW: u32 = ${cols / groupSize}u;
const QUADS_PER_GROUP: u32 = ${groupSize / 4}u;
fn loadW(row: u32, k4: u32) -> vec4<f32> {
  let q = w[row * K4 + k4];
  // Sign-extend each byte: shift it to the top, then arithmetic-shift back down.
  let b = bitcast<vec4<i32>>(vec4<u32>(q << 24u, q << 16u, q << 8u, q)) >> vec4<u32>(24u);
  return vec4<f32>(b) * wScales[row * GROUPS_PER_ROW + k4 / QUADS_PER_GROUP];
}
`;
}
