/** Pairs per dispatch (they travel in a uniform block). */
export const COPY_PAIRS_PER_DISPATCH = 128;
/** Invocations per workgroup; each copies one `vec4<u32>`. */
export const COPY_WORKGROUP = 64;

/**
 * WGSL copying whole blocks inside one cache buffer: workgroup `(x, pair)` copies 64 vec4s of
 * block `src → dst`. Blocks are multiples of 4 words by the layout contract.
 */
export function copyBlocksShader(): string {
  return /* wgsl */ `
struct Params { num_pairs: u32, block_vec4: u32, _p0: u32, _p1: u32,
                pairs: array<vec4<u32>, ${COPY_PAIRS_PER_DISPATCH / 2}> }
@group(0) @binding(0) var<storage, read_write> kv: array<vec4<u32>>;
@group(0) @binding(1) var<uniform> params: Params;

@compute @workgroup_size(${COPY_WORKGROUP})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
  let p = wid.y;
  let i = gid.x;
  if (p >= params.num_pairs || i >= params.block_vec4) { return; }
  let v = params.pairs[p / 2u];
  let src = select(v.x, v.z, (p & 1u) == 1u);
  let dst = select(v.y, v.w, (p & 1u) == 1u);
  kv[dst * params.block_vec4 + i] = kv[src * params.block_vec4 + i];
}
`;
}
