/** Invocations per workgroup of the element-wise kernels. */
export const ELEMENTWISE_WORKGROUP = 128;

// The element count comes from a uniform so one pipeline serves every batch size; the
// dispatch may be 2-D when it exceeds 65,535 workgroups.
const head = /* wgsl */ `
struct Params { count: u32, width: u32 }
@group(0) @binding(3) var<uniform> params: Params;
fn flatIndex(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
  return (wid.y * nwg.x + wid.x) * ${ELEMENTWISE_WORKGROUP}u + lid;
}
`;

/** `out = silu(gate) · up`. Bindings: 0 gate, 1 up, 2 out, 3 params {count}. */
export function swigluWgsl(): string {
  return /* wgsl */ `${head}
@group(0) @binding(0) var<storage, read> gate: array<f32>;
@group(0) @binding(1) var<storage, read> up: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@compute @workgroup_size(${ELEMENTWISE_WORKGROUP})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let i = flatIndex(wid, nwg, lid);
  if (i < params.count) {
    let g = gate[i];
    out[i] = g / (1.0 + exp(-g)) * up[i];
  }
}
`;
}

/** `a += b` (residual add). Bindings: 0 b, 2 a, 3 params {count}. */
export function addWgsl(): string {
  return /* wgsl */ `${head}
@group(0) @binding(0) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> a: array<f32>;
@compute @workgroup_size(${ELEMENTWISE_WORKGROUP})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let i = flatIndex(wid, nwg, lid);
  if (i < params.count) { a[i] += b[i]; }
}
`;
}

/** `x[m][n] += bias[n]`. Bindings: 0 bias, 2 x, 3 params {count, width}. */
export function biasAddWgsl(): string {
  return /* wgsl */ `${head}
@group(0) @binding(0) var<storage, read> bias: array<f32>;
@group(0) @binding(2) var<storage, read_write> x: array<f32>;
@compute @workgroup_size(${ELEMENTWISE_WORKGROUP})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let i = flatIndex(wid, nwg, lid);
  if (i < params.count) { x[i] += bias[i % params.width]; }
}
`;
}
