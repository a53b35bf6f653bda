import type { WeightFormat } from './weight-format';

/**
 * WGSL declarations of a packed weight (`w`, and `wScales` for int8) and `loadW(row, k4)`,
 * which returns elements `4*k4 .. 4*k4+3` of row `row` as f32. `K4` (packed quads per row)
 * must be a module constant.
 */
export function weightLoadWgsl(
  format: WeightFormat,
  wBinding: number,
  scaleBinding: number,
  groupSize: number,
  cols: number,
): string {
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
  return vec4<f32>(unpack2x16float(p.x), unpack2x16float(p.y));
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
