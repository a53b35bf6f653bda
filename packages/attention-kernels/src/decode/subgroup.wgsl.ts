/**
 * The `'subgroup'` decode kernel: WGSL of paged decode attention for adapters with the
 * `subgroups` feature (pass 1; pass 2 is shared with the other decode kernels in
 * split-k-reduce.wgsl.ts). The shape of vLLM's and FlashInfer's decode kernels: no workgroup memory and no barrier inside the key loop.
 *
 * A workgroup of {@link SUBGROUP_WORKGROUP} invocations per (split, KV head × head chunk, sequence) is
 * cut into lane groups of R invocations (R a power of two no larger than the adapter's smallest
 * subgroup, so a lane group never straddles subgroups). A lane group owns whole keys: its R
 * lanes read one K row together (lane r the 8-element chunks r, r + R, ...: neighbouring lanes
 * read neighbouring 16-byte words), each forms partial dot products against the rows' queries
 * held in its registers, and a butterfly of `subgroupShuffleXor` over the R lanes leaves every
 * lane with the full scores. Each lane then runs the same online softmax (its own copy of the
 * rows' max and sum) and accumulates p·V for its chunks of the V row. A lane group takes
 * `keysPerStep` ({@link SUBGROUP_KEYS} by default) consecutive keys per step, their K loads all issued before any is used, and the
 * lane groups of a workgroup interleave over the split's keys. The lane groups' states (max, sum,
 * partial output) are merged once at the end through workgroup memory.
 *
 * The key loop's trip count is the same for the whole workgroup (lane groups past the end work
 * on a valid key and mask it), so the subgroup operations run in uniform control flow.
 */
import {
  type AttentionShaderOptions,
  decodeWorkgroupKeys,
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
} from '../attention/shader-common.wgsl.js';

/** Invocations per workgroup. */
export const SUBGROUP_WORKGROUP = 128;
/** Default consecutive keys a lane group scores per step (their loads in flight together). */
export const SUBGROUP_KEYS = 4;
/** The keys-per-step values the kernel is generated for (each divides a split's 64-key grain). */
export const SUBGROUP_KEYS_CHOICES = [2, 4, 8] as const;

/**
 * Lanes per key row for `headDim` on an adapter whose subgroups have at least
 * `subgroupMinSize` invocations: the largest power of two no larger than either the row's
 * 8-element chunks or the subgroup.
 */
export function subgroupLanesPerRow(headDim: number, subgroupMinSize: number): number {
  const chunks = headDim / 8;
  let r = 1;
  while (r * 2 <= Math.min(chunks, subgroupMinSize)) r *= 2;
  return r;
}

/** Geometry of the kernel for a head dim and lanes per row. */
function geometry(headDim: number, lanesPerRow: number) {
  const chunks = headDim / 8;
  const groups = SUBGROUP_WORKGROUP / lanesPerRow;
  return {
    chunks,
    /** Chunks per lane (the last may be past the row for some lanes). */
    perLane: Math.ceil(chunks / lanesPerRow),
    groups,
    /** Slots of the final merge tree (half the lane groups). */
    half: Math.max(1, groups / 2),
  };
}

/** Bytes of workgroup memory the kernel declares (checked against the device limit). */
export function subgroupDecodeWorkgroupBytes(o: {
  readonly headDim: number;
  readonly headsPerWorkgroup: number;
  readonly lanesPerRow: number;
}): number {
  const { groups, half } = geometry(o.headDim, o.lanesPerRow);
  const G = o.headsPerWorkgroup;
  const D4 = o.headDim / 4;
  // q_sh, ml_sh, tree_sh, the subgroup counter.
  return 16 * G * D4 + 8 * groups * G + 16 * half * G * D4 + 4;
}

/** Pass-1 source of the subgroup decode kernel (`mode` 'decode' or 'decode-split'). */
export function subgroupDecodeShader(
  o: AttentionShaderOptions & { readonly lanesPerRow: number; readonly keysPerStep?: number },
): string {
  if (o.mode === 'prefill') throw new RangeError('the subgroup kernel is decode-only');
  const R = o.lanesPerRow;
  if (!Number.isInteger(Math.log2(R)) || R < 1 || R > SUBGROUP_WORKGROUP) {
    throw new RangeError(
      `lanesPerRow must be a power of two up to ${SUBGROUP_WORKGROUP}, got ${R}`,
    );
  }
  const G = o.headsPerWorkgroup;
  const D4 = o.headDim / 4;
  const U = o.keysPerStep ?? SUBGROUP_KEYS;
  if (!(SUBGROUP_KEYS_CHOICES as readonly number[]).includes(U)) {
    throw new RangeError(
      `keysPerStep must be one of ${SUBGROUP_KEYS_CHOICES.join(', ')}, got ${U}`,
    );
  }
  const { chunks, perLane: J, groups: NG, half } = geometry(o.headDim, R);
  const group = o.numQHeads / o.numKvHeads;
  const split = o.mode === 'decode-split';
  const load = kvLoadFn(o);
  // A step's U keys start at a multiple of U (splits start at multiples of 64): when U divides
  // the block size they always share a block.
  const sameBlock = o.blockSize % U === 0;
  // Names: query chunk j of row g, halves 0/1 (q{g}_{j}_{e}); accumulator the same (a...).
  const qn = (g: number, j: number, e: number) => `q${g}_${j}_${e}`;
  const an = (g: number, j: number, e: number) => `a${g}_${j}_${e}`;
  const each = (f: (g: number, j: number, e: number) => string, sep = '\n'): string =>
    rep(G, (g) => rep(J, (j) => rep(2, (e) => f(g, j, e), sep), sep), sep);
  // The same for writes to workgroup memory, which must skip chunks past the row (a clamped
  // chunk aliases the last real one).
  const eachValid = (f: (g: number, j: number, e: number) => string): string =>
    rep(J, (j) => {
      const body = rep(G, (g) => rep(2, (e) => f(g, j, e)));
      return J * R === chunks ? body : `    if (ch_ok${j}) {\n${body}\n    }`;
    });
  // Butterfly over the R lanes of a lane group: every lane ends with the sum.
  const strides: number[] = [];
  for (let s = R / 2; s >= 1; s /= 2) strides.push(s);
  const treeStrides: number[] = [];
  for (let s = NG / 2; s >= 1; s /= 2) treeStrides.push(s);
  // Element (row g, chunk slot j, half e) of tree slot `slot`.
  const tree = (slot: string, g: number, j: number, e: number) =>
    `tree_sh[((${slot}) * G + ${g}u) * D4 + 2u * ch${j} + ${e}u]`;
  const validChunk = (j: number): string => (J * R === chunks ? 'true' : `ch_ok${j}`);

  const outputs = rep(G, (g) => {
    const row = split
      ? `(seq * NUM_Q_HEADS + head0 + ${g}u) * params.max_splits + split`
      : `seq * NUM_Q_HEADS + head0 + ${g}u`;
    const scale = split ? '' : ` * inv${g}`;
    return `    {
      let row = ${row};
${
  split
    ? `      if (r == 0u) {
        ml[row] = vec2<f32>(m${g}, l${g});
      }`
    : `      ${rowInverse(o, `head0 + ${g}u`, `m${g}`, `l${g}`, `inv${g}`)}`
}
${rep(
  J,
  (j) => `      if (${validChunk(j)}) {
${rep(2, (e) => `        out[row * D4 + 2u * ch${j} + ${e}u] = ${an(g, j, e)}${scale};`)}
      }`,
)}
    }`;
  });

  return /* wgsl */ `enable subgroups;
${pass1Bindings(o.mode)}
${sinksDecl(o)}

const D4: u32 = ${D4}u;
const G: u32 = ${G}u;
const HEAD_CHUNKS: u32 = ${group / G}u;
const NUM_Q_HEADS: u32 = ${o.numQHeads}u;
const WG: u32 = ${SUBGROUP_WORKGROUP}u;
const R: u32 = ${R}u;
const NG: u32 = ${NG}u;
const U: u32 = ${U}u;
const CHUNKS: u32 = ${chunks}u;
const BLOCK_SIZE: u32 = ${o.blockSize}u;
const SLAB_WORDS: u32 = ${o.slabWords}u;
const BLOCK_WORDS: u32 = ${o.blockWords}u;
const MASK: f32 = ${MASK};

var<workgroup> q_sh: array<vec4<f32>, ${G * D4}>;
// Each lane group's (max, sum) per row, for the final merge.
var<workgroup> ml_sh: array<vec2<f32>, ${NG * G}>;
var<workgroup> tree_sh: array<vec4<f32>, ${half * G * D4}>;
// Numbers the subgroups of the workgroup (zero-initialized, like all workgroup memory).
var<workgroup> sg_count: atomic<u32>;

${o.kvLoad}
${rotateRunFn(o.rotation)}
@compute @workgroup_size(${SUBGROUP_WORKGROUP})
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(local_invocation_index) lane: u32,
  @builtin(subgroup_invocation_id) sg_lane: u32,
  @builtin(subgroup_size) sg_size: u32,
) {
${decodeWorkgroupKeys(o)}
  let bt = params.bt_offset + seq * params.max_blocks;

  for (var i = lane; i < G * D4; i += WG) {
    q_sh[i] = query[(seq * NUM_Q_HEADS + head0) * D4 + i] * ${f32Literal(o.qScale)};
  }
  // This invocation's lane group: R consecutive lanes of one subgroup, numbered through a
  // counter so nothing is assumed about how invocations map to subgroups.
  var sg_index = 0u;
  if (subgroupElect()) {
    sg_index = atomicAdd(&sg_count, 1u);
  }
  sg_index = subgroupBroadcastFirst(sg_index);
  let grp = sg_index * (sg_size / R) + sg_lane / R;
  let r = sg_lane % R;
  workgroupBarrier();
${rotateQSh(o.rotation, G * o.headDim, SUBGROUP_WORKGROUP)}

  // This lane's chunks of the rows: r, r + R, ... (a chunk past the row reads the last one
  // with a zero query, so it adds nothing to a score, and is never written out).
${rep(J, (j) => `  let ch_ok${j} = r + ${j * R}u < CHUNKS;\n  let ch${j} = min(r + ${j * R}u, CHUNKS - 1u);`)}
${each((g, j, e) => `  let ${qn(g, j, e)} = select(vec4<f32>(0.0), q_sh[${g}u * D4 + 2u * ch${j} + ${e}u], ch_ok${j});`)}
${rep(G, (g) => `  var m${g} = MASK;\n  var l${g} = 0.0;`)}
${each((g, j, e) => `  var ${an(g, j, e)} = vec4<f32>(0.0);`)}

  for (var k0 = key_begin; k0 < key_end; k0 += NG * U) {
    let first = k0 + grp * U;
${
  sameBlock
    ? `    // The step's keys share one block (U divides the block size and every step starts at a
    // multiple of U): one block-table read. Past the end they all read the last key.
    let base = min(first, key_end - 1u);
    let slab = meta_[bt + base / BLOCK_SIZE] * BLOCK_WORDS + 2u * kvh * SLAB_WORDS;
${rep(
  U,
  (u) => `    let slab${u} = slab;
    let t${u} = min(first + ${u}u, key_end - 1u) % BLOCK_SIZE;`,
)}`
    : rep(
        U,
        (u) => `    let key${u} = min(first + ${u}u, key_end - 1u);
    let slab${u} = meta_[bt + key${u} / BLOCK_SIZE] * BLOCK_WORDS + 2u * kvh * SLAB_WORDS;
    let t${u} = key${u} % BLOCK_SIZE;`,
      )
}
${rep(U, (u) => rep(J, (j) => `    let k${u}_${j} = ${load}(slab${u}, t${u}, ch${j});`))}
${rep(U, (u) =>
  rep(
    G,
    (g) =>
      `    var d${g}_${u} = ${rep(J, (j) => `dot(${qn(g, j, 0)}, k${u}_${j}[0]) + dot(${qn(g, j, 1)}, k${u}_${j}[1])`, ' + ')};`,
  ),
)}
${strides
  .map((s) =>
    rep(U, (u) => rep(G, (g) => `    d${g}_${u} += subgroupShuffleXor(d${g}_${u}, ${s}u);`)),
  )
  .join('\n')}
${rep(G, (g) => {
  const s = (u: number) => `s${g}_${u}`;
  return `${rep(U, (u) => `    let ${s(u)} = select(${scoreExpr(o, `d${g}_${u}`)}, MASK, first + ${u}u >= key_end${windowMask(o, `first + ${u}u`, 'ctx')});`)}
    let mn${g} = max(m${g}, ${Array.from({ length: U }, (_, u) => s(u)).reduce((a, b) => `max(${a}, ${b})`)});
    let alpha${g} = exp2(m${g} - mn${g});
${rep(U, (u) => `    let p${g}_${u} = exp2(${s(u)} - mn${g});`)}
    m${g} = mn${g};
    l${g} = l${g} * alpha${g} + ${Array.from({ length: U }, (_, u) => `p${g}_${u}`).join(' + ')};
${rep(J, (j) => rep(2, (e) => `    ${an(g, j, e)} *= alpha${g};`))}`;
})}
${rep(U, (u) => rep(J, (j) => `    let v${u}_${j} = ${load}(slab${u} + SLAB_WORDS, t${u}, ch${j});`))}
${rep(U, (u) => each((g, j, e) => `    ${an(g, j, e)} += p${g}_${u} * v${u}_${j}[${e}];`))}
  }

  // Merge the lane groups: the rows' overall max, each group's state rescaled to it, then a
  // tree of sums over workgroup memory.
  if (r == 0u) {
${rep(G, (g) => `    ml_sh[grp * G + ${g}u] = vec2<f32>(m${g}, l${g});`)}
  }
  workgroupBarrier();
${rep(
  G,
  (g) => `  {
    var mx = MASK;
    for (var i = 0u; i < NG; i++) {
      mx = max(mx, ml_sh[i * G + ${g}u].x);
    }
    var sum = 0.0;
    for (var i = 0u; i < NG; i++) {
      let s = ml_sh[i * G + ${g}u];
      sum += s.y * exp2(s.x - mx);
    }
    let sc = exp2(m${g} - mx);
${rep(J, (j) => rep(2, (e) => `    ${an(g, j, e)} *= sc;`))}
    m${g} = mx;
    l${g} = sum;
  }`,
)}
${treeStrides
  .map(
    (s) => `  if (grp >= ${s}u && grp < ${2 * s}u) {
${eachValid((g, j, e) => `    ${tree(`grp - ${s}u`, g, j, e)} = ${an(g, j, e)};`)}
  }
  workgroupBarrier();
  if (grp < ${s}u) {
${each((g, j, e) => `    ${an(g, j, e)} += ${tree('grp', g, j, e)};`)}
  }
  workgroupBarrier();`,
  )
  .join('\n')}
${
  o.rotation === undefined
    ? ''
    : `  // Rotated format: the output is H·acc / R, runs spanning lanes: through q_sh.
  if (grp == 0u) {
${eachValid((g, j, e) => `    q_sh[${g}u * D4 + 2u * ch${j} + ${e}u] = ${an(g, j, e)};`)}
  }
  workgroupBarrier();
${rotateQSh(o.rotation, G * o.headDim, SUBGROUP_WORKGROUP)}
  if (grp == 0u) {
${each((g, j, e) => `    ${an(g, j, e)} = q_sh[${g}u * D4 + 2u * ch${j} + ${e}u];`)}
  }`
}
  if (grp == 0u) {
${outputs}
  }
}
`;
}
