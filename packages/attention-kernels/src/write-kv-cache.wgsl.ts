import type { KvCacheLayout } from './layout.js';

/** Invocations per workgroup of the cache writer (one workgroup per (token, kv head)). */
export const WRITE_KV_WORKGROUP = 64;

/**
 * WGSL of the cache writer (vLLM's reshape_and_cache): workgroup `(token, head)` encodes that
 * token's K and V rows of `head` into the slot `slot_mapping[token]` (skipped when negative or
 * outside the cache). Element encoding comes from the layout's format; for scaled formats the
 * row's absmax is reduced in workgroup memory first.
 */
export function writeKvCacheShader(layout: KvCacheLayout): string {
  const { headDim: D, blockSize: B, numKvHeads: H, slabWords, blockWords, format } = layout;
  const W = WRITE_KV_WORKGROUP;
  const store = format.wgslStore({ headDim: D, blockSize: B, cacheVar: 'kv', cacheElement: 'u32' });
  const scaled = format.rowScaled;
  const reduce = scaled
    ? /* wgsl */ `
    var m = 0.0;
    for (var e = lid; e < ${D}u; e += ${W}u) {
      let a = abs(kv_src(e));
      // NaN and infinities must not set the scale.
      if (a < 3.0e38) { m = max(m, a); }
    }
    red[lid] = m;
    workgroupBarrier();
    for (var s = ${W / 2}u; s > 0u; s >>= 1u) {
      if (lid < s) { red[lid] = max(red[lid], red[lid + s]); }
      workgroupBarrier();
    }
    let scale = kv_row_scale(red[0]);
    workgroupBarrier();
    if (lid == 0u) { kv_store_scale(slab, off, scale); }`
    : /* wgsl */ `
    let scale = 1.0;`;
  return /* wgsl */ `
struct Params { num_tokens: u32, num_slots: u32, _p0: u32, _p1: u32 }
@group(0) @binding(0) var<storage, read> key_in: array<f32>;
@group(0) @binding(1) var<storage, read> value_in: array<f32>;
@group(0) @binding(2) var<storage, read> slot_mapping: array<i32>;
@group(0) @binding(3) var<storage, read_write> kv: array<u32>;
@group(0) @binding(4) var<uniform> params: Params;

var<private> src_base: u32;
var<private> src_sel: u32;
${scaled ? `var<workgroup> red: array<f32, ${W}>;` : ''}
var<workgroup> slot_sh: i32;

fn kv_src(e: u32) -> f32 {
  if (src_sel == 0u) { return key_in[src_base + e]; }
  return value_in[src_base + e];
}
${store}
@compute @workgroup_size(${W})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let id = wid.y * nwg.x + wid.x;
  let token = id / ${H}u;
  let head = id % ${H}u;
  if (lid == 0u) {
    slot_sh = -1;
    if (token < params.num_tokens) { slot_sh = slot_mapping[token]; }
  }
  let slot = workgroupUniformLoad(&slot_sh);
  if (slot < 0 || u32(slot) >= params.num_slots) { return; }
  let block = u32(slot) / ${B}u;
  let off = u32(slot) % ${B}u;
  src_base = (token * ${H}u + head) * ${D}u;
  for (var sel = 0u; sel < 2u; sel++) {
    src_sel = sel;
    let slab = block * ${blockWords}u + (2u * head + sel) * ${slabWords}u;${reduce}
    for (var c = lid; c < ${D}u / KV_STORE_CHUNK; c += ${W}u) { kv_store_chunk(slab, off, c, scale); }
  }
}
`;
}
