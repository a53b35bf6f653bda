import type { KvCacheLayout } from '../layout.js';

/** Invocations per workgroup of the cache writer (one workgroup per (token, kv head)). */
export const WRITE_KV_WORKGROUP = 64;

/**
 * WGSL of the cache writer (vLLM's reshape_and_cache): each token's K and V rows go to slot
 * `slot_mapping[token]` (skipped when negative or outside the cache), encoded by the layout's
 * format. Unscaled formats use one invocation per store chunk; row-scaled formats one workgroup
 * per (token, head), which reduces the row's absmax in workgroup memory first.
 */
export function writeKvCacheShader(layout: KvCacheLayout): string {
  return layout.format.rowScaled ? scaledShader(layout) : flatShader(layout);
}

const HEADER = /* wgsl */ `
struct Params { num_tokens: u32, num_slots: u32, _p0: u32, _p1: u32 }
@group(0) @binding(0) var<storage, read> key_in: array<f32>;
@group(0) @binding(1) var<storage, read> value_in: array<f32>;
@group(0) @binding(2) var<storage, read> slot_mapping: array<i32>;
@group(0) @binding(3) var<storage, read_write> kv: array<u32>;
@group(0) @binding(4) var<uniform> params: Params;

var<private> src_base: u32;
var<private> src_sel: u32;

fn kv_src(e: u32) -> f32 {
  if (src_sel == 0u) { return key_in[src_base + e]; }
  return value_in[src_base + e];
}
`;

/**
 * Invocations (one per store chunk of a (token, head) row) the writer dispatches for unscaled
 * formats; scaled formats use one workgroup per (token, head) instead.
 */
export function writeKvCacheInvocations(layout: KvCacheLayout, numTokens: number): number {
  return (
    numTokens * layout.numKvHeads * Math.ceil(layout.headDim / (layout.format.storeChunk ?? 1))
  );
}

/** Unscaled formats: invocation (token, head, chunk), no workgroup cooperation needed. */
function flatShader(layout: KvCacheLayout): string {
  const { headDim: D, blockSize: B, numKvHeads: H, slabWords, blockWords, format } = layout;
  const W = WRITE_KV_WORKGROUP;
  const store = format.wgslStore({ headDim: D, blockSize: B, cacheVar: 'kv', cacheElement: 'u32' });
  return /* wgsl */ `${HEADER}
${store}
@compute @workgroup_size(${W})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let id = gid.y * nwg.x * ${W}u + gid.x;
  let chunks = ${D}u / KV_STORE_CHUNK;
  let token = id / (${H}u * chunks);
  if (token >= params.num_tokens) { return; }
  let slot = slot_mapping[token];
  if (slot < 0 || u32(slot) >= params.num_slots) { return; }
  let rem = id % (${H}u * chunks);
  let head = rem / chunks;
  let c = rem % chunks;
  let block = u32(slot) / ${B}u;
  let off = u32(slot) % ${B}u;
  src_base = (token * ${H}u + head) * ${D}u;
  for (var sel = 0u; sel < 2u; sel++) {
    src_sel = sel;
    kv_store_chunk(block * ${blockWords}u + (2u * head + sel) * ${slabWords}u, off, c, 1.0);
  }
}
`;
}

/** Row-scaled formats: workgroup (token, head) reduces the row's absmax, then stores. */
function scaledShader(layout: KvCacheLayout): string {
  const { headDim: D, blockSize: B, numKvHeads: H, slabWords, blockWords, format } = layout;
  const W = WRITE_KV_WORKGROUP;
  const store = format.wgslStore({ headDim: D, blockSize: B, cacheVar: 'kv', cacheElement: 'u32' });
  return /* wgsl */ `${HEADER}
var<workgroup> red: array<f32, ${W}>;
var<workgroup> slot_sh: i32;
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
    let slab = block * ${blockWords}u + (2u * head + sel) * ${slabWords}u;
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
    if (lid == 0u) { kv_store_scale(slab, off, scale); }
    for (var c = lid; c < ${D}u / KV_STORE_CHUNK; c += ${W}u) { kv_store_chunk(slab, off, c, scale); }
  }
}
`;
}
