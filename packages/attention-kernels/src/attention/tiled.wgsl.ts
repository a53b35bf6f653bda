/**
 * The `'tiled'` kernel: WGSL of paged attention over the KV cache, generated per configuration;
 * decode and prefill (both with `kernel: 'tiled'`) share this pass-1 kernel, which differs only
 * in how a workgroup finds its rows and key range.
 *
 * Pass 1: a workgroup per (work item, KV head × head chunk), where a work item is one KV split
 * of one sequence (decode) or a few consecutive new tokens of one sequence (prefill). Its rows
 * are (token, query head) pairs sharing one KV head, so every K/V row is read once for all of
 * them. It stages the rows' queries (pre-scaled) and each tile's block ids in workgroup memory,
 * then per tile of {@link DECODE_TILE} keys:
 *   S: invocation j scores key j against every row (one K row read for all of them, queries
 *      in registers), masking keys past a row's causal bound;
 *   V: invocations split as (key subset × 16- or 32-element slice of the head dim) run an online
 *      softmax (exp2, log2(e) folded into the query scale) over their keys, reading one V
 *      chunk per key for all rows.
 * One barrier per tile (after S): scores are double-buffered and block ids triple-buffered, so
 * the next tile's S never overwrites what a slower invocation still reads in V. Software
 * adapters turn every workgroup-memory and storage load into a per-lane scalar loop, so the
 * kernel is shaped to load each K/V word once and little else, and S and V run in uniform
 * control flow (lanes past a partial tile work on a valid key and mask its score): the same
 * loads under a divergent branch or loop bound took about twice as long on llvmpipe.
 * The key subsets (each with its own running max) are merged once at the end. Decode with one
 * split and prefill write the normalized output; decode with several splits writes the unnormalized partial output and its
 * (max, sum) to scratch for pass 2, a workgroup per (sequence, query head), which merges them.
 */

import {
  type AttentionShaderOptions,
  f32Literal,
  kvLoadFn,
  MASK,
  pass1Bindings,
  rep,
  rotateQSh,
  rotateRunFn,
  rowInverse,
  scoreExpr,
  sinksDecl,
  windowMask,
  windowStart,
} from './shader-common.wgsl.js';

/** Keys per tile and invocations per pass-1 workgroup. */
export const DECODE_TILE = 64;

/**
 * Pass-1 shader source. Loops over rows and head-dim chunks are unrolled into named scalars
 * (dynamically indexed private arrays become memory with a per-lane loop on software
 * adapters); rows per workgroup stay at most {@link MAX_ROWS_PER_WORKGROUP} so that the
 * unrolled code stays small enough for their JIT.
 */
export function tiledAttentionShader(o: AttentionShaderOptions): string {
  const W = DECODE_TILE;
  const D4 = o.headDim / 4;
  const HG = o.headsPerWorkgroup;
  const TOK = o.tokensPerWorkgroup;
  const GW = HG * TOK;
  const group = o.numQHeads / o.numKvHeads;
  const chunks = o.headDim / 8;
  // Each V-phase invocation owns VCH consecutive 8-element chunks: fewer invocations per key
  // means fewer redundant score loads and exp2 per key.
  const VCH = o.vChunksPerLane;
  if (!Number.isInteger(VCH) || VCH < 1 || chunks % VCH !== 0) {
    throw new RangeError(`vChunksPerLane ${VCH} does not divide headDim / 8 = ${chunks}`);
  }
  const q = (i: number): string => (o.queryInRegisters ? `q${i}` : `q_sh[${i}]`);
  const vLanes = chunks / VCH;
  const keySubsets = Math.floor(W / vLanes);
  const accs = (g: number): string[] => Array.from({ length: 2 * VCH }, (_, i) => `a${g}_${i}`);
  const btSlots = Math.floor((W - 1) / o.blockSize) + 2;
  const prefill = o.mode === 'prefill';
  const score = (g: number): string => scoreExpr(o, `d${g}`);
  // Row g = token (g / HG) of the work item, head (g % HG) of the workgroup's head chunk.
  const tokOf = (g: number): number => Math.floor(g / HG);
  const masked = (g: number): string =>
    prefill
      ? ` || key >= lim${tokOf(g)}${windowMask(o, 'key', `lim${tokOf(g)}`)}`
      : windowMask(o, 'key', 'ctx');

  const locate = prefill
    ? `  let seq = meta_[2u * wid.x];
  let tok0 = meta_[2u * wid.x + 1u];
  let q_start = meta_[params.qstart_offset + seq];
  let q_len = meta_[params.qlen_offset + seq];
  let ctx = meta_[params.ctx_offset + seq];
  let past = ctx - q_len;
  let n_tok = min(TOK, q_len - tok0);
  var key_begin = 0u;
  // Keys up to the causal bound of the item's last token.
  let key_end = past + tok0 + n_tok;
${rep(TOK, (t) => `  let lim${t} = past + tok0 + ${t + 1}u;`)}
${windowStart(o, 'lim0')}
  let q_row0 = q_start + tok0;`
    : `  let split = wid.x;
  let seq = wid.z;
  let ctx = meta_[params.ctx_offset + seq];
  var key_begin = split * params.chunk_tokens;
  // Whole workgroups past a short sequence's last split leave before any barrier.
  if (key_begin >= ctx && split > 0u) {
    return;
  }
  let key_end = min(ctx, key_begin + params.chunk_tokens);
${windowStart(o, 'ctx')}
  let n_tok = 1u;
  let q_row0 = seq;`;

  // With sinks the row's max (the subsets' common one, which l_sh is relative to) is needed.
  const rowMax =
    o.sinks === undefined
      ? ''
      : `var mx = MASK;
      for (var r = 0u; r < KEY_SUBSETS; r++) {
        mx = max(mx, m_sh[g * KEY_SUBSETS + r]);
      }
      `;
  const finalWrite = `let denom = l_sh[g];
      ${rowMax}${rowInverse(o, 'head0 + h', 'mx', 'denom')}
      out[((q_row0 + t) * NUM_Q_HEADS + head0 + h) * D4 + k] = q_sh[i] * inv;`;
  const splitWrite = `let row = (seq * NUM_Q_HEADS + head0 + h) * params.max_splits + split;
      out[row * D4 + k] = q_sh[i];
      if (k == 0u) {
        var mx = MASK;
        for (var r = 0u; r < KEY_SUBSETS; r++) {
          mx = max(mx, m_sh[g * KEY_SUBSETS + r]);
        }
        ml[row] = vec2<f32>(mx, l_sh[g]);
      }`;

  return /* wgsl */ `
${pass1Bindings(o.mode)}
${sinksDecl(o)}

const D4: u32 = ${D4}u;
const CHUNKS: u32 = ${chunks}u;
const HG: u32 = ${HG}u;
const TOK: u32 = ${TOK}u;
const GW: u32 = ${GW}u;
const HEAD_CHUNKS: u32 = ${group / HG}u;
const NUM_Q_HEADS: u32 = ${o.numQHeads}u;
const W: u32 = ${W}u;
const KEY_SUBSETS: u32 = ${keySubsets}u;
const V_LANES: u32 = ${vLanes}u;
const BLOCK_SIZE: u32 = ${o.blockSize}u;
const SLAB_WORDS: u32 = ${o.slabWords}u;
const BLOCK_WORDS: u32 = ${o.blockWords}u;
const BT_SLOTS: u32 = ${btSlots}u;
const MASK: f32 = ${MASK};

var<workgroup> q_sh: array<vec4<f32>, ${GW * D4}>;
// Scores, double-buffered by tile parity: the next tile's S writes the other half while
// slower invocations may still read this one in V.
var<workgroup> s_sh: array<f32, ${2 * GW * W}>;
// Block ids, triple-buffered: tile t reads buffer t % 3 while S of tile t loads t + 1 into
// (t + 1) % 3, which no invocation still in V of tile t - 1 reads.
var<workgroup> bt_sh: array<u32, ${3 * btSlots}>;
var<workgroup> l_sh: array<f32, ${GW}>;
var<workgroup> m_sh: array<f32, ${GW * keySubsets}>;

${o.kvLoad}
${rotateRunFn(o.rotation)}
fn load_block_ids(buf: u32, tile_start: u32, seq: u32, num_blocks: u32, lane: u32) {
  if (lane < BT_SLOTS) {
    let b = tile_start / BLOCK_SIZE + lane;
    var id = 0u;
    if (b < num_blocks) {
      id = meta_[params.bt_offset + seq * params.max_blocks + b];
    }
    bt_sh[buf * BT_SLOTS + lane] = id;
  }
}

@compute @workgroup_size(${W})
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(local_invocation_index) lane: u32,
) {
  let kvh = wid.y / HEAD_CHUNKS;
  let head0 = wid.y * HG;
${locate}
  let num_blocks = (key_end + BLOCK_SIZE - 1u) / BLOCK_SIZE;

  for (var i = lane; i < GW * D4; i += W) {
    let t = i / (HG * D4);
    var qv = vec4<f32>(0.0);
    if (t < n_tok) {
      qv = query[((q_row0 + t) * NUM_Q_HEADS + head0) * D4 + i % (HG * D4)];
    }
    q_sh[i] = qv * ${f32Literal(o.qScale)};
  }
  load_block_ids(0u, key_begin, seq, num_blocks, lane);
  workgroupBarrier();
${rotateQSh(o.rotation, GW * o.headDim, W)}

  // The rows' queries live in registers: on software adapters every workgroup-memory load is
  // a per-lane scalar loop, so reading q per key would cost more than the K row itself.
${o.queryInRegisters ? rep(GW * D4, (i) => `  let q${i} = q_sh[${i}];`) : '  // Queries stay in workgroup memory (broadcast reads).'}

  // V-phase role: dims [8c, 8c+8) over keys ks, ks + KEY_SUBSETS, ... with its own running
  // max per row (merged across key subsets once at the end).
  let ks = lane / V_LANES;
  let c = lane % V_LANES;
  let v_active = ks < KEY_SUBSETS;
${rep(
  GW,
  (g) =>
    `  var m${g} = MASK;\n  var l${g} = 0.0;\n${accs(g)
      .map((a) => `  var ${a} = vec4<f32>(0.0);`)
      .join('\n')}`,
)}

  var buf = 0u;
  var sb = 0u;
  for (var tile_start = key_begin; tile_start < key_end; tile_start += W) {
    let tile_len = min(W, key_end - tile_start);
    let first_block = tile_start / BLOCK_SIZE;

    // S: invocation \`lane\` scores its key against every row (one K row read for all).
    // Lanes past the tile's end score its first key and store MASK instead of branching:
    // software adapters run loads under a divergent branch as masked per-lane loops, which
    // cost about as much as the rest of the kernel.
    {
      let key = tile_start + select(0u, lane, lane < tile_len);
      let block = bt_sh[buf * BT_SLOTS + key / BLOCK_SIZE - first_block];
      let slab = block * BLOCK_WORDS + 2u * kvh * SLAB_WORDS;
      let t = key % BLOCK_SIZE;
${rep(GW, (g) => `      var d${g} = 0.0;`)}
${rep(
  chunks,
  (cc) => `      {
        let k8 = ${kvLoadFn(o)}(slab, t, ${cc}u);
${rep(GW, (g) => `        d${g} += dot(${q(g * D4 + 2 * cc)}, k8[0]) + dot(${q(g * D4 + 2 * cc + 1)}, k8[1]);`)}
      }`,
)}
${rep(GW, (g) => `      s_sh[${g * W}u + sb * ${GW * W}u + lane] = select(${score(g)}, MASK, lane >= tile_len${masked(g)});`)}
    }
    load_block_ids((buf + 1u) % 3u, tile_start + W, seq, num_blocks, lane);
    workgroupBarrier();

    // V: online softmax over this invocation's key subset, one V chunk read per key.
    // The loop bound is uniform for the same reason: a lane whose key is past the tile's end
    // reads the tile's first key with score MASK, which leaves its state unchanged (p = 0).
    ${keySubsets * vLanes === W ? '{' : 'if (v_active) {'}
      for (var j0 = 0u; j0 < tile_len; j0 += KEY_SUBSETS) {
        let in_tile = j0 + ks < tile_len;
        let j = select(0u, j0 + ks, in_tile);
        let key = tile_start + j;
        let block = bt_sh[buf * BT_SLOTS + key / BLOCK_SIZE - first_block];
        let slab = block * BLOCK_WORDS + (2u * kvh + 1u) * SLAB_WORDS;
${rep(VCH, (v) => `        let v${v} = ${kvLoadFn(o)}(slab, key % BLOCK_SIZE, ${VCH}u * c + ${v}u);`)}
${rep(
  GW,
  (g) => `        {
          let s = select(MASK, s_sh[${g * W}u + sb * ${GW * W}u + j], in_tile);
          let m_new = max(m${g}, s);
          let alpha = exp2(m${g} - m_new);
          let p = select(0.0, exp2(s - m_new), s > -1.0e29);
          m${g} = m_new;
          l${g} = l${g} * alpha + p;
${accs(g)
  .map((a, i) => `          ${a} = ${a} * alpha + p * v${i >> 1}[${i & 1}];`)
  .join('\n')}
        }`,
)}
      }
    }
    buf = (buf + 1u) % 3u;
    sb ^= 1u;
  }

  // Merge the key subsets: the common max per row, then rescaled sums into q_sh.
  if (v_active && c == 0u) {
${rep(GW, (g) => `    m_sh[${g * keySubsets}u + ks] = m${g};`)}
  }
  workgroupBarrier();
${rep(
  GW,
  (g) => `  var mm${g} = MASK;
  for (var r = 0u; r < KEY_SUBSETS; r++) {
    mm${g} = max(mm${g}, m_sh[${g * keySubsets}u + r]);
  }
  let f${g} = exp2(m${g} - mm${g});`,
)}
  for (var r = 0u; r < KEY_SUBSETS; r++) {
    if (v_active && ks == r) {
      if (r == 0u) {
${rep(GW, (g) =>
  accs(g)
    .map((a, i) => `        q_sh[${g * D4 + i}u + ${2 * VCH}u * c] = ${a} * f${g};`)
    .join('\n'),
)}
      } else {
${rep(GW, (g) =>
  accs(g)
    .map((a, i) => `        q_sh[${g * D4 + i}u + ${2 * VCH}u * c] += ${a} * f${g};`)
    .join('\n'),
)}
      }
      if (c == 0u) {
        if (r == 0u) {
${rep(GW, (g) => `          l_sh[${g}] = l${g} * f${g};`)}
        } else {
${rep(GW, (g) => `          l_sh[${g}] += l${g} * f${g};`)}
        }
      }
    }
    workgroupBarrier();
  }

${rotateQSh(o.rotation, GW * o.headDim, W)}
  for (var i = lane; i < GW * D4; i += W) {
    let g = i / D4;
    let t = g / HG;
    let h = g % HG;
    let k = i % D4;
    if (t < n_tok) {
      ${o.mode === 'decode-split' ? splitWrite : finalWrite}
    }
  }
}
`;
}
