import type { KvCacheLayout } from '../layout.js';

/**
 * Keys one invocation of the first mass pass walks: whole blocks, about 64 keys. Bounding each
 * invocation's work matters: llvmpipe cut a first version's invocations that walked every
 * mass query of a block (77 queries × 32 heads × d128) short, and GPUs have watchdogs too.
 */
export function massKeyChunk(blockSize: number): number {
  return blockSize * Math.max(1, Math.floor(64 / blockSize));
}

/** What fixes the mass shaders besides the cache layout. */
export interface MassShaderOptions {
  readonly numQHeads: number;
  readonly scale: number;
  readonly softCap: number | undefined;
  /** Invocations per workgroup: 8 (one llvmpipe SIMD vector) on software adapters, else 64. */
  readonly workgroup: number;
}

/**
 * Query heads scored together against one loaded K row: the largest divisor of the GQA group
 * up to 8, so each key is decoded once per group of heads rather than once per head.
 */
export function massHeadsPerRow(numQHeads: number, numKvHeads: number): number {
  const group = numQHeads / numKvHeads;
  let h = Math.min(8, group);
  while (group % h !== 0) h--;
  return h;
}

/** `f(0) .. f(n - 1)` on separate lines (per-head code with constant indices). */
function unrolled(n: number, f: (g: number) => string, indent = '  '): string {
  return Array.from({ length: n }, (_, g) => f(g)).join(`\n${indent}`);
}

// The three passes share this prelude. Like the 'software' attention kernel, no pass uses
// workgroup memory or barriers: on llvmpipe a barrier turns a shader into coroutines whose
// live values round-trip through memory, and the per-head values are separate variables
// because software adapters spill dynamically indexed private arrays.
function prelude(layout: KvCacheLayout, o: MassShaderOptions): string {
  const { headDim: D, blockSize: B, slabWords, blockWords, numKvHeads } = layout;
  const HG = massHeadsPerRow(o.numQHeads, numKvHeads);
  const cap = (x: string) =>
    o.softCap === undefined
      ? ''
      : ` ${x} = tanh(${x} / ${o.softCap.toFixed(9)}) * ${o.softCap.toFixed(9)};`;
  // Query rows start at multiples of headDim (a multiple of 16): one vec4 load per 4 values.
  const q = (at: string) => `query[(${at}) >> 2u]`;
  return /* wgsl */ `
struct Params { max_blocks: u32, max_mass_q: u32, max_chunks: u32, num_seqs: u32 }
@group(0) @binding(0) var<storage, read> query: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> kv: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read> tables: array<u32>;
// Per sequence: (first query row, query length, context length, mass queries).
@group(0) @binding(3) var<storage, read> seqs: array<vec4<u32>>;
@group(0) @binding(4) var<uniform> params: Params;

${layout.format.wgslLoad({ headDim: D, blockSize: B })}

// Scaled (and capped) scores of ${HG} query heads (rows at q_off + g * ${D}) against key j of
// sequence seq, whose K row is that of KV head kvh: the row is decoded once for all of them.
fn mass_scores(seq: u32, q_off: u32, kvh: u32, j: u32) -> array<f32, ${HG}> {
  let block = tables[seq * params.max_blocks + j / ${B}u];
  let slab = block * ${blockWords}u + 2u * kvh * ${slabWords}u;
  let t = j % ${B}u;
  ${unrolled(HG, (g) => `var a${g} = 0.0;`)}
  for (var c = 0u; c < ${D / 8}u; c++) {
    let k = kv_load8(slab, t, c);
    let e = q_off + 8u * c;
    ${unrolled(HG, (g) => `a${g} += dot(${q(`e + ${g * D}u`)}, k[0]) + dot(${q(`e + ${g * D + 4}u`)}, k[1]);`, '    ')}
  }
  ${unrolled(HG, (g) => `var x${g} = a${g} * ${o.scale.toPrecision(9)};${cap(`x${g}`)}`)}
  return array<f32, ${HG}>(${Array.from({ length: HG }, (_, g) => `x${g}`).join(', ')});
}

fn invocation(gid: vec3<u32>, nwg: vec3<u32>) -> u32 {
  return gid.y * nwg.x * ${o.workgroup}u + gid.x;
}
`;
}

/** Invocations of the first pass: (sequence, mass query, head group, key chunk). */
export function massPartialsInvocations(
  numSeqs: number,
  maxMassQueries: number,
  headGroups: number,
  maxChunks: number,
): number {
  return numSeqs * maxMassQueries * headGroups * maxChunks;
}

/**
 * Pass 1: invocation (sequence, mass query, group of query heads, chunk of
 * {@link massKeyChunk} keys) finds each head's max score over the chunk's visible keys, then
 * sums `exp(score - max)` over the chunk (`partials[row][chunk]` = (max, sum)) and per block
 * (`local[row][block]`, relative to the same max). The last pass scales these; no other pass
 * computes a `q·k`.
 */
export function massPartialsShader(layout: KvCacheLayout, o: MassShaderOptions): string {
  const NQ = o.numQHeads;
  const { headDim: D, blockSize: B } = layout;
  const KC = massKeyChunk(B);
  const HG = massHeadsPerRow(NQ, layout.numKvHeads);
  const groups = NQ / HG;
  const perKv = NQ / layout.numKvHeads / HG;
  return /* wgsl */ `${prelude(layout, o)}
@group(0) @binding(5) var<storage, read_write> partials: array<vec2<f32>>;
@group(0) @binding(7) var<storage, read_write> local: array<f32>;

@compute @workgroup_size(${o.workgroup})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let id = invocation(gid, nwg);
  let chunk = id % params.max_chunks;
  let rest = id / params.max_chunks;
  let hg = rest % ${groups}u;
  let rest2 = rest / ${groups}u;
  let qi = rest2 % params.max_mass_q;
  let s = rest2 / params.max_mass_q;
  if (s >= params.num_seqs) { return; }
  let info = seqs[s];
  if (qi >= info.w) { return; }
  let i = info.y - info.w + qi;
  let h0 = hg * ${HG}u;
  let q_off = ((info.x + i) * ${NQ}u + h0) * ${D}u;
  let kvh = hg / ${perKv}u;
  let row = (s * params.max_mass_q + qi) * ${NQ}u + h0;
  // Keys 0 ..= past + i are visible.
  let first = chunk * ${KC}u;
  let end = min(info.z - info.y + i + 1u, first + ${KC}u);
  ${unrolled(HG, (g) => `var m${g} = -3.0e38;`)}
  for (var j = first; j < end; j++) {
    let x = mass_scores(s, q_off, kvh, j);
    ${unrolled(HG, (g) => `m${g} = max(m${g}, x[${g}]);`, '    ')}
  }
  ${unrolled(HG, (g) => `var s${g} = 0.0;\n  var b${g} = 0.0;`)}
  for (var j = first; j < end; j++) {
    let x = mass_scores(s, q_off, kvh, j);
    ${unrolled(HG, (g) => `let p${g} = exp(x[${g}] - m${g});\n    s${g} += p${g};\n    b${g} += p${g};`, '    ')}
    if ((j + 1u) % ${B}u == 0u || j + 1u == end) {
      let at = row * params.max_blocks + j / ${B}u;
      ${unrolled(HG, (g) => `local[at + ${g}u * params.max_blocks] = b${g};\n      b${g} = 0.0;`, '      ')}
    }
  }
  ${unrolled(HG, (g) => `partials[(row + ${g}u) * params.max_chunks + chunk] = vec2<f32>(m${g}, s${g});`)}
}
`;
}

/**
 * Pass 2: invocation (sequence, mass query, head) merges its row's chunk partials into the
 * row's softmax (max, denominator).
 */
export function massMergeShader(o: MassShaderOptions): string {
  return /* wgsl */ `
struct Params { max_blocks: u32, max_mass_q: u32, max_chunks: u32, num_seqs: u32 }
@group(0) @binding(4) var<uniform> params: Params;
@group(0) @binding(5) var<storage, read> partials: array<vec2<f32>>;
@group(0) @binding(6) var<storage, read_write> stats: array<vec2<f32>>;

@compute @workgroup_size(${o.workgroup})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let row = gid.y * nwg.x * ${o.workgroup}u + gid.x;
  if (row >= params.num_seqs * params.max_mass_q * ${o.numQHeads}u) { return; }
  var m = -3.0e38;
  var s = 0.0;
  for (var c = 0u; c < params.max_chunks; c++) {
    let p = partials[row * params.max_chunks + c];
    let n = max(m, p.x);
    s = s * exp(m - n) + p.y * exp(p.x - n);
    m = n;
  }
  stats[row] = vec2<f32>(m, s);
}
`;
}

/**
 * Pass 3: invocation (sequence, logical block) adds, over every mass query and head that sees
 * the block, its local sum rescaled to the row's softmax (`exp(chunk max - max) / denominator`),
 * into the sequence's entry for the block (one owner per entry: no atomics).
 */
export function massBlocksShader(layout: KvCacheLayout, o: MassShaderOptions): string {
  const NQ = o.numQHeads;
  const { blockSize: B } = layout;
  const chunkBlocks = massKeyChunk(B) / B;
  return /* wgsl */ `
struct Params { max_blocks: u32, max_mass_q: u32, max_chunks: u32, num_seqs: u32 }
@group(0) @binding(3) var<storage, read> seqs: array<vec4<u32>>;
@group(0) @binding(4) var<uniform> params: Params;
@group(0) @binding(5) var<storage, read> partials: array<vec2<f32>>;
@group(0) @binding(6) var<storage, read> stats: array<vec2<f32>>;
@group(0) @binding(7) var<storage, read> local: array<f32>;
@group(0) @binding(8) var<storage, read_write> mass_out: array<f32>;

@compute @workgroup_size(${o.workgroup})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let id = gid.y * nwg.x * ${o.workgroup}u + gid.x;
  let b = id % params.max_blocks;
  let s = id / params.max_blocks;
  if (s >= params.num_seqs) { return; }
  let info = seqs[s];
  let first = b * ${B}u;
  if (info.w == 0u || first >= info.z) { return; }
  let past = info.z - info.y;
  let chunk = b / ${chunkBlocks}u;
  var acc = 0.0;
  for (var qi = 0u; qi < info.w; qi++) {
    // Query i sees keys up to past + i: a block after that got nothing from it.
    if (first > past + info.y - info.w + qi) { continue; }
    let row0 = (s * params.max_mass_q + qi) * ${NQ}u;
    for (var h = 0u; h < ${NQ}u; h++) {
      let st = stats[row0 + h];
      let pc = partials[(row0 + h) * params.max_chunks + chunk];
      acc += local[(row0 + h) * params.max_blocks + b] * exp(pc.x - st.x) / st.y;
    }
  }
  mass_out[s * params.max_blocks + b] += acc;
}
`;
}
