import type { KvCacheLayout } from '../layout.js';
import { mergeWgsl } from '../wgsl-merge.js';
import type { RopeStyle } from './rope-reference.js';

/**
 * WGSL re-rotating cached keys in place: invocation (shift, head, slot) decodes its K row with
 * the format's loader into private memory, rotates it by the tables' entry at |delta| (sine
 * negated for a negative delta) with `applyRopeReference`'s f32 operations, and encodes it back
 * with the format's writer (its absmax first for row-scaled formats). No workgroup memory and
 * no barrier: on llvmpipe a barrier turns the shader into coroutines whose live values
 * round-trip through memory. Shifts with a block outside the cache or an out-of-range delta
 * are skipped (the wrapper checks host shifts).
 */
export function shiftKeysShader(
  layout: KvCacheLayout,
  rope: { style: RopeStyle; half: number },
  workgroup: number,
): string {
  const { headDim: D, blockSize: B, numKvHeads: H, slabWords, blockWords, format } = layout;
  const half = rope.half;
  const pair =
    rope.style === 'rotate-half'
      ? `let a = i; let b = i + ${half}u;`
      : 'let a = 2u * i; let b = 2u * i + 1u;';
  const io = { headDim: D, blockSize: B, cacheVar: 'kv', cacheElement: 'u32' } as const;
  const codec = mergeWgsl(format.wgslLoad(io), format.wgslStore(io));
  const scaled = format.rowScaled
    ? /* wgsl */ `
  var m = 0.0;
  for (var e = 0u; e < ${D}u; e++) {
    let x = abs(row_out[e]);
    // NaN and infinities must not set the scale (as the cache writer).
    if (x < 3.0e38) { m = max(m, x); }
  }
  let scale = kv_row_scale(m);
  kv_store_scale(slab, t, scale);`
    : `
  let scale = 1.0;`;
  return /* wgsl */ `
struct Params { num_shifts: u32, num_blocks: u32, max_position: u32, _p0: u32 }
@group(0) @binding(0) var<storage, read_write> kv: array<u32>;
@group(0) @binding(1) var<storage, read> shifts: array<vec2<i32>>;
@group(0) @binding(2) var<storage, read> cos_t: array<f32>;
@group(0) @binding(3) var<storage, read> sin_t: array<f32>;
@group(0) @binding(4) var<uniform> params: Params;

var<private> row_out: array<f32, ${D}>;

fn kv_src(e: u32) -> f32 { return row_out[e]; }
${codec}
@compute @workgroup_size(${workgroup})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let id = gid.y * nwg.x * ${workgroup}u + gid.x;
  let shift = id / ${H * B}u;
  if (shift >= params.num_shifts) { return; }
  let rem = id % ${H * B}u;
  let head = rem / ${B}u;
  let t = rem % ${B}u;
  let sh = shifts[shift];
  let dist = u32(abs(sh.y));
  if (u32(sh.x) >= params.num_blocks || dist == 0u || dist >= params.max_position) { return; }
  let slab = u32(sh.x) * ${blockWords}u + 2u * head * ${slabWords}u;
  for (var c = 0u; c < ${D / 8}u; c++) {
    let v = kv_load8(slab, t, c);
    for (var k = 0u; k < 4u; k++) {
      row_out[8u * c + k] = v[0][k];
      row_out[8u * c + 4u + k] = v[1][k];
    }
  }
  let sign = select(1.0, -1.0, sh.y < 0);
  for (var i = 0u; i < ${half}u; i++) {
    ${pair}
    let c = cos_t[dist * ${half}u + i];
    let s = sign * sin_t[dist * ${half}u + i];
    let x0 = row_out[a];
    let x1 = row_out[b];
    row_out[a] = x0 * c - x1 * s;
    row_out[b] = x1 * c + x0 * s;
  }${scaled}
  for (var c = 0u; c < ${D}u / KV_STORE_CHUNK; c++) { kv_store_chunk(slab, t, c, scale); }
}
`;
}
