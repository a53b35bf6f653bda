import type { RopeStyle } from './rope-reference.js';

/** Invocations per RoPE workgroup. */
export const ROPE_WORKGROUP = 64;

/**
 * WGSL of in-place RoPE: one invocation per (token, head of Q then K, rotation pair), reading
 * the shared f32 cos/sin tables; tokens whose position is outside the tables are left alone.
 */
export function ropeShader(o: {
  numQHeads: number;
  numKvHeads: number;
  headDim: number;
  half: number;
  style: RopeStyle;
}): string {
  const heads = o.numQHeads + o.numKvHeads;
  const pair =
    o.style === 'rotate-half'
      ? `let a = i; let b = i + ${o.half}u;`
      : 'let a = 2u * i; let b = 2u * i + 1u;';
  return /* wgsl */ `
struct Params { num_tokens: u32, max_position: u32, _p0: u32, _p1: u32 }
@group(0) @binding(0) var<storage, read_write> q: array<f32>;
@group(0) @binding(1) var<storage, read_write> k: array<f32>;
@group(0) @binding(2) var<storage, read> positions: array<u32>;
@group(0) @binding(3) var<storage, read> cos_t: array<f32>;
@group(0) @binding(4) var<storage, read> sin_t: array<f32>;
@group(0) @binding(5) var<uniform> params: Params;

@compute @workgroup_size(${ROPE_WORKGROUP})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let id = gid.y * nwg.x * ${ROPE_WORKGROUP}u + gid.x;
  let per_token = ${heads * o.half}u;
  let token = id / per_token;
  if (token >= params.num_tokens) { return; }
  let pos = positions[token];
  if (pos >= params.max_position) { return; }
  let rem = id % per_token;
  let head = rem / ${o.half}u;
  let i = rem % ${o.half}u;
  ${pair}
  let c = cos_t[pos * ${o.half}u + i];
  let s = sin_t[pos * ${o.half}u + i];
  if (head < ${o.numQHeads}u) {
    let row = (token * ${o.numQHeads}u + head) * ${o.headDim}u;
    let x0 = q[row + a];
    let x1 = q[row + b];
    q[row + a] = x0 * c - x1 * s;
    q[row + b] = x1 * c + x0 * s;
  } else {
    let row = (token * ${o.numKvHeads}u + head - ${o.numQHeads}u) * ${o.headDim}u;
    let x0 = k[row + a];
    let x1 = k[row + b];
    k[row + a] = x0 * c - x1 * s;
    k[row + b] = x1 * c + x0 * s;
  }
}
`;
}
