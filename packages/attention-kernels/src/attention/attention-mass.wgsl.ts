import type { KvCacheLayout } from '../layout.js';

/** Invocations per workgroup of both attention-mass passes. */
export const MASS_WORKGROUP = 64;

/** What fixes the mass shaders besides the cache layout. */
export interface MassShaderOptions {
  readonly numQHeads: number;
  readonly scale: number;
  readonly softCap: number | undefined;
}

function header(layout: KvCacheLayout, o: MassShaderOptions): string {
  const { headDim: D, blockSize: B, slabWords, blockWords, numKvHeads } = layout;
  const group = o.numQHeads / numKvHeads;
  const cap =
    o.softCap === undefined
      ? ''
      : `s = tanh(s / ${o.softCap.toFixed(9)}) * ${o.softCap.toFixed(9)};`;
  return /* wgsl */ `
struct Params { max_blocks: u32, max_mass_q: u32, _p0: u32, _p1: u32 }
@group(0) @binding(0) var<storage, read> query: array<f32>;
@group(0) @binding(1) var<storage, read> kv: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read> tables: array<u32>;
// Per sequence: (first query row, query length, context length, mass queries).
@group(0) @binding(3) var<storage, read> seqs: array<vec4<u32>>;
@group(0) @binding(5) var<uniform> params: Params;

${layout.format.wgslLoad({ headDim: D, blockSize: B })}

// Scaled (and capped) q·k of query row q_off against key j of sequence s, head h.
fn mass_score(seq: u32, q_off: u32, h: u32, j: u32) -> f32 {
  let block = tables[seq * params.max_blocks + j / ${B}u];
  let slab = block * ${blockWords}u + 2u * (h / ${group}u) * ${slabWords}u;
  let t = j % ${B}u;
  var acc = 0.0;
  for (var c = 0u; c < ${D / 8}u; c++) {
    let k = kv_load8(slab, t, c);
    let e = q_off + 8u * c;
    acc += dot(vec4<f32>(query[e], query[e + 1u], query[e + 2u], query[e + 3u]), k[0]);
    acc += dot(vec4<f32>(query[e + 4u], query[e + 5u], query[e + 6u], query[e + 7u]), k[1]);
  }
  var s = acc * ${o.scale.toPrecision(9)};
  ${cap}
  return s;
}
`;
}

/**
 * Pass 1: workgroup (mass query × head, sequence) runs an online softmax over the keys its
 * query sees and stores the row's (max, denominator).
 */
export function massStatsShader(layout: KvCacheLayout, o: MassShaderOptions): string {
  const W = MASS_WORKGROUP;
  const NQ = o.numQHeads;
  const D = layout.headDim;
  return /* wgsl */ `${header(layout, o)}
@group(0) @binding(4) var<storage, read_write> stats: array<vec2<f32>>;
var<workgroup> red_m: array<f32, ${W}>;
var<workgroup> red_s: array<f32, ${W}>;

@compute @workgroup_size(${W})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let s = wid.y;
  let qi = wid.x / ${NQ}u;
  let h = wid.x % ${NQ}u;
  let info = seqs[s];
  let live = qi < info.w;
  let i = info.y - info.w + qi;
  let q_off = ((info.x + i) * ${NQ}u + h) * ${D}u;
  // Keys 0 ..= past + i; none for an inactive row (no early return before the barriers).
  let visible = select(0u, info.z - info.y + i + 1u, live);
  var m = -3.0e38;
  var sum = 0.0;
  for (var j = lid; j < visible; j += ${W}u) {
    let x = mass_score(s, q_off, h, j);
    if (x > m) {
      sum = sum * exp(m - x) + 1.0;
      m = x;
    } else {
      sum += exp(x - m);
    }
  }
  red_m[lid] = m;
  red_s[lid] = sum;
  workgroupBarrier();
  for (var st = ${W / 2}u; st > 0u; st >>= 1u) {
    if (lid < st) {
      let m2 = max(red_m[lid], red_m[lid + st]);
      red_s[lid] = red_s[lid] * exp(red_m[lid] - m2) + red_s[lid + st] * exp(red_m[lid + st] - m2);
      red_m[lid] = m2;
    }
    workgroupBarrier();
  }
  if (lid == 0u && live) {
    stats[(s * params.max_mass_q + qi) * ${NQ}u + h] = vec2<f32>(red_m[0], red_s[0]);
  }
}
`;
}

/**
 * Pass 2: workgroup (logical block, sequence) sums the probabilities every mass query and head
 * gives the block's keys, and adds the sum into the sequence's entry for the block (each entry
 * has one owner: no atomics).
 */
export function massBlocksShader(layout: KvCacheLayout, o: MassShaderOptions): string {
  const W = MASS_WORKGROUP;
  const NQ = o.numQHeads;
  const { headDim: D, blockSize: B } = layout;
  return /* wgsl */ `${header(layout, o)}
@group(0) @binding(4) var<storage, read> stats: array<vec2<f32>>;
@group(0) @binding(6) var<storage, read_write> mass_out: array<f32>;
var<workgroup> red: array<f32, ${W}>;

@compute @workgroup_size(${W})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let s = wid.y;
  let b = wid.x;
  let info = seqs[s];
  let first = b * ${B}u;
  let past = info.z - info.y;
  let len = select(0u, min(${B}u, info.z - first), first < info.z);
  let items = info.w * ${NQ}u * len;
  var acc = 0.0;
  for (var it = lid; it < items; it += ${W}u) {
    let t = it % len;
    let rest = it / len;
    let h = rest % ${NQ}u;
    let qi = rest / ${NQ}u;
    let i = info.y - info.w + qi;
    let j = first + t;
    if (j <= past + i) {
      let st = stats[(s * params.max_mass_q + qi) * ${NQ}u + h];
      let q_off = ((info.x + i) * ${NQ}u + h) * ${D}u;
      acc += exp(mass_score(s, q_off, h, j) - st.x) / st.y;
    }
  }
  red[lid] = acc;
  workgroupBarrier();
  for (var st = ${W / 2}u; st > 0u; st >>= 1u) {
    if (lid < st) { red[lid] += red[lid + st]; }
    workgroupBarrier();
  }
  if (lid == 0u && len > 0u && info.w > 0u) {
    mass_out[s * params.max_blocks + b] += red[0];
  }
}
`;
}
