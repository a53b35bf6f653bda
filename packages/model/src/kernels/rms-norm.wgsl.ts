/** Invocations per RMSNorm workgroup (one workgroup per row). */
export const RMS_NORM_WORKGROUP = 64;

/**
 * RMSNorm, a workgroup per row with a tree reduction of Σx². With `gather`, output row i
 * normalizes input row `rowIndex[i]` (the final norm runs only on rows whose logits are
 * needed). With `add`, the result is added into `y` (a sandwich norm before its residual add).
 * Bindings: 0 x, 1 weight (f32), 2 y, 4 rowIndex. Dispatch `(M)`.
 */
export function rmsNormWgsl(h: number, eps: number, gather: boolean, add = false): string {
  const WG = RMS_NORM_WORKGROUP;
  return /* wgsl */ `
const H4: u32 = ${h / 4}u;
@group(0) @binding(0) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> weight: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> y: array<vec4<f32>>;
${gather ? '@group(0) @binding(4) var<storage, read> rowIndex: array<i32>;' : ''}
var<workgroup> red: array<f32, ${WG}>;

@compute @workgroup_size(${WG})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let row = wid.x;
  let src = ${gather ? 'u32(rowIndex[row])' : 'row'} * H4;
  var ss = 0.0;
  for (var i = lid; i < H4; i += ${WG}u) {
    let v = x[src + i];
    ss += dot(v, v);
  }
  red[lid] = ss;
  workgroupBarrier();
  for (var s = ${WG / 2}u; s > 0u; s >>= 1u) {
    if (lid < s) { red[lid] += red[lid + s]; }
    workgroupBarrier();
  }
  let inv = inverseSqrt(red[0] / ${h}.0 + ${eps.toExponential()});
  for (var i = lid; i < H4; i += ${WG}u) {
    y[row * H4 + i] ${add ? '+=' : '='} x[src + i] * inv * weight[i];
  }
}
`;
}

/**
 * RMSNorm of every head of every token in place (Qwen3's Q/K norm: each head's `d` values
 * normalized and scaled by one `d`-long weight), a workgroup per (token, head). Bindings:
 * 0 x (rw), 1 weight (f32). Dispatch `(T, heads)`.
 */
export function headRmsNormWgsl(d: number, heads: number, eps: number): string {
  const WG = RMS_NORM_WORKGROUP;
  return /* wgsl */ `
const D4: u32 = ${d / 4}u;
const HEADS: u32 = ${heads}u;
@group(0) @binding(0) var<storage, read_write> x: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> weight: array<vec4<f32>>;
var<workgroup> red: array<f32, ${WG}>;

@compute @workgroup_size(${WG})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let base = (wid.x * HEADS + wid.y) * D4;
  var ss = 0.0;
  for (var i = lid; i < D4; i += ${WG}u) {
    let v = x[base + i];
    ss += dot(v, v);
  }
  red[lid] = ss;
  workgroupBarrier();
  for (var s = ${WG / 2}u; s > 0u; s >>= 1u) {
    if (lid < s) { red[lid] += red[lid + s]; }
    workgroupBarrier();
  }
  let inv = inverseSqrt(red[0] / ${d}.0 + ${eps.toExponential()});
  for (var i = lid; i < D4; i += ${WG}u) {
    x[base + i] = x[base + i] * inv * weight[i];
  }
}
`;
}
