/**
 * The `'hardware'` decode kernel: WGSL of paged decode attention shaped for hardware GPUs
 * (pass 1; pass 2 is shared with the other decode kernels in split-k-reduce.wgsl.ts).
 *
 * A workgroup of {@link HARDWARE_WORKGROUP} invocations per (split, KV head × head chunk, sequence)
 * walks its keys in sub-chunks of {@link HARDWARE_WORKGROUP} keys, in three phases per sub-chunk:
 *   A: invocation j scores key j against every row (queries read from workgroup memory, where
 *      all invocations read the same word: a broadcast), scores to workgroup memory;
 *   B: the sub-chunk's max and sum per row from those scores (16 invocations per row, then one),
 *      the running max and sum rescaled once per sub-chunk, and probabilities written back;
 *   C: invocations split as (key subset × 8-element chunk of the head dim) accumulate p·V with
 *      coalesced reads (the chunks of one V row are adjacent invocations), all of an
 *      invocation's keys of the sub-chunk in flight at once (a loop with one key per iteration
 *      waits out the memory latency once per key), block ids from workgroup memory (staged in
 *      phase A) rather than a dependent global load.
 * The key subsets are merged once at the end by a tree in workgroup memory. Unlike the
 * tiled kernel, nothing here rescales per key, and every K and V word is read by
 * exactly one invocation with many loads in flight per invocation: what a GPU needs to reach its
 * memory bandwidth. Software adapters run the software-shaped kernel (workgroup memory and barriers cost
 * about as much as global loads there).
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
export const HARDWARE_WORKGROUP = 256;
/**
 * Keys per sub-chunk: one per phase-A invocation. (512, two per invocation, measured slower on
 * an H200: 0.36 of streaming bandwidth against 0.45, the larger unrolled phase C spilling.)
 */
const SC = HARDWARE_WORKGROUP;
/** Invocations per row in the first step of the phase-B reductions. */
const SEGMENTS = 32;

/**
 * Phase-C geometry of a head dim: its 8-element chunks, the key subsets (one invocation per
 * chunk each), and the slots of the final merge tree (half the subsets).
 */
function phaseC(headDim: number): { chunks: number; subsets: number; half: number } {
  const chunks = headDim / 8;
  const subsets = Math.floor(HARDWARE_WORKGROUP / chunks);
  return { chunks, subsets, half: Math.ceil(subsets / 2) };
}

/** Bytes of workgroup memory the kernel declares for `o` (checked against the device limit). */
export function hardwareDecodeWorkgroupBytes(o: {
  readonly headDim: number;
  readonly headsPerWorkgroup: number;
}): number {
  const { half } = phaseC(o.headDim);
  const G = o.headsPerWorkgroup;
  const D4 = o.headDim / 4;
  return 4 * (G * D4 * 4 + G * SC + G * SEGMENTS + 3 * G + half * G * D4 * 4 + SC + 1);
}

/**
 * WGSL: SEGMENTS invocations per row each fold SC / SEGMENTS of the row's values in `s_sh` with
 * `op` (from `init`) into `seg_sh`, the first step of phase B's max and sum.
 */
function foldSegments(init: string, op: (acc: string, x: string) => string): string {
  return `    if (lane < G * SEG) {
      let base = (lane / SEG) * SC + (lane % SEG) * (SC / SEG);
      var acc = ${init};
      for (var i = 0u; i < SC / SEG; i++) {
        acc = ${op('acc', 's_sh[base + i]')};
      }
      seg_sh[lane] = acc;
    }
    workgroupBarrier();`;
}

/** Pass-1 source of the hardware-shaped decode kernel (`mode` 'decode' or 'decode-split'). */
export function hardwareDecodeShader(o: AttentionShaderOptions): string {
  if (o.mode === 'prefill') throw new RangeError('the hardware-shaped kernel is decode-only');
  const WG = HARDWARE_WORKGROUP;
  const G = o.headsPerWorkgroup;
  const D4 = o.headDim / 4;
  const { chunks, subsets, half } = phaseC(o.headDim);
  const group = o.numQHeads / o.numKvHeads;
  // Keys per phase-C invocation per sub-chunk, all loads in flight at once: at most 16 (head
  // dim 128), so their registers stay bounded.
  const perLane = Math.ceil(SC / subsets);
  const btSlots = Math.floor((SC - 1) / o.blockSize) + 2;
  const split = o.mode === 'decode-split';
  const score = (g: number): string => scoreExpr(o, `d${g}`);
  // Tree levels of the final merge of key subsets: strides P/2, P/4, ..., 1 (P = 2^k ≥ subsets).
  const strides: number[] = [];
  for (let s = 2 ** Math.ceil(Math.log2(subsets)) / 2; s >= 1; s /= 2) strides.push(s);
  const accs = (g: number): [string, string] => [`a${g}_0`, `a${g}_1`];
  const trIndex = (g: number, e: number, slot: string): string =>
    `((${slot}) * ${G}u + ${g}u) * D4 + 2u * c + ${e}u`;

  const outputs = rep(G, (g) => {
    const [a0, a1] = accs(g);
    if (split) {
      return `    {
      let row = (seq * NUM_Q_HEADS + head0 + ${g}u) * params.max_splits + split;
      out[row * D4 + 2u * c] = ${a0};
      out[row * D4 + 2u * c + 1u] = ${a1};
      if (c == 0u) {
        ml[row] = vec2<f32>(m_sh[${g}], l_sh[${g}]);
      }
    }`;
    }
    return `    {
      let denom = l_sh[${g}];
      ${rowInverse(o, `head0 + ${g}u`, `m_sh[${g}]`, 'denom')}
      let row = seq * NUM_Q_HEADS + head0 + ${g}u;
      out[row * D4 + 2u * c] = ${a0} * inv;
      out[row * D4 + 2u * c + 1u] = ${a1} * inv;
    }`;
  });

  return /* wgsl */ `
${pass1Bindings(o.mode)}
${sinksDecl(o)}

const D4: u32 = ${D4}u;
const G: u32 = ${G}u;
const HEAD_CHUNKS: u32 = ${group / G}u;
const NUM_Q_HEADS: u32 = ${o.numQHeads}u;
const WG: u32 = ${WG}u;
const SC: u32 = ${SC}u;
const SEG: u32 = ${SEGMENTS}u;
const CHUNKS: u32 = ${chunks}u;
const SUBSETS: u32 = ${subsets}u;
const BLOCK_SIZE: u32 = ${o.blockSize}u;
const SLAB_WORDS: u32 = ${o.slabWords}u;
const BLOCK_WORDS: u32 = ${o.blockWords}u;
const MASK: f32 = ${MASK};

var<workgroup> q_sh: array<vec4<f32>, ${G * D4}>;
// Scores of the sub-chunk per row, then (phase B) their probabilities.
var<workgroup> s_sh: array<f32, ${G * SC}>;
var<workgroup> seg_sh: array<f32, ${G * SEGMENTS}>;
var<workgroup> m_sh: array<f32, ${G}>;
var<workgroup> l_sh: array<f32, ${G}>;
var<workgroup> alpha_sh: array<f32, ${G}>;
var<workgroup> tree_sh: array<vec4<f32>, ${half * G * D4}>;
// The sub-chunk's block ids (written in phase A by the invocation of each block's first key).
var<workgroup> bt_sh: array<u32, ${btSlots}>;

${o.kvLoad}
${rotateRunFn(o.rotation)}
fn block_of(seq: u32, key: u32) -> u32 {
  return meta_[params.bt_offset + seq * params.max_blocks + key / BLOCK_SIZE];
}

@compute @workgroup_size(${WG})
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(local_invocation_index) lane: u32,
) {
${decodeWorkgroupKeys(o)}

  for (var i = lane; i < G * D4; i += WG) {
    q_sh[i] = query[(seq * NUM_Q_HEADS + head0) * D4 + i] * ${f32Literal(o.qScale)};
  }
  if (lane < G) {
    m_sh[lane] = MASK;
    l_sh[lane] = 0.0;
  }
  workgroupBarrier();
${rotateQSh(o.rotation, G * o.headDim, WG)}

  // Phase-C role: dims [8c, 8c + 8) over keys ks, ks + SUBSETS, ... of each sub-chunk.
  let c = lane % CHUNKS;
  let ks = lane / CHUNKS;
${rep(G, (g) =>
  accs(g)
    .map((a) => `  var ${a} = vec4<f32>(0.0);`)
    .join('\n'),
)}

  for (var c0 = key_begin; c0 < key_end; c0 += SC) {
    let n = min(SC, key_end - c0);

    // A: one key per invocation; past the end, score a valid key and mask it.
    {
      let key = c0 + min(lane, n - 1u);
      let block = block_of(seq, key);
      if (lane == 0u || key % BLOCK_SIZE == 0u) {
        bt_sh[key / BLOCK_SIZE - c0 / BLOCK_SIZE] = block;
      }
      let slab = block * BLOCK_WORDS + 2u * kvh * SLAB_WORDS;
      let t = key % BLOCK_SIZE;
${rep(G, (g) => `      var d${g} = 0.0;`)}
${rep(
  chunks,
  (cc) => `      {
        let k8 = ${kvLoadFn(o)}(slab, t, ${cc}u);
${rep(G, (g) => `        d${g} += dot(q_sh[${g * D4 + 2 * cc}u], k8[0]) + dot(q_sh[${g * D4 + 2 * cc + 1}u], k8[1]);`)}
      }`,
)}
${rep(G, (g) => `      s_sh[${g * SC}u + lane] = select(${score(g)}, MASK, lane >= n${windowMask(o, 'key', 'ctx')});`)}
    }
    workgroupBarrier();

    // B: row maxima (SEG invocations per row, then one), the running max, probabilities.
${foldSegments('MASK', (a, x) => `max(${a}, ${x})`)}
    if (lane < G) {
      let m_old = m_sh[lane];
      var mx = m_old;
      for (var i = 0u; i < SEG; i++) {
        mx = max(mx, seg_sh[lane * SEG + i]);
      }
      m_sh[lane] = mx;
      alpha_sh[lane] = exp2(m_old - mx);
    }
    workgroupBarrier();
${rep(
  G,
  (g) =>
    `    s_sh[${g * SC}u + lane] = select(0.0, exp2(s_sh[${g * SC}u + lane] - m_sh[${g}]), lane < n);`,
)}
    workgroupBarrier();
${foldSegments('0.0', (a, x) => `${a} + ${x}`)}
    if (lane < G) {
      var sum = 0.0;
      for (var i = 0u; i < SEG; i++) {
        sum += seg_sh[lane * SEG + i];
      }
      l_sh[lane] = l_sh[lane] * alpha_sh[lane] + sum;
    }

    // C: p·V over this invocation's keys, all loads issued before any is used.
    if (ks < SUBSETS) {
${rep(G, (g) => {
  const [a0, a1] = accs(g);
  return `      let al${g} = alpha_sh[${g}];\n      ${a0} *= al${g};\n      ${a1} *= al${g};`;
})}
      let b0 = c0 / BLOCK_SIZE;
${rep(
  perLane,
  (u) => `      let j${u} = min(ks + ${u * subsets}u, n - 1u);
      let key${u} = c0 + j${u};
      let v${u} = ${kvLoadFn(o)}(bt_sh[key${u} / BLOCK_SIZE - b0] * BLOCK_WORDS + (2u * kvh + 1u) * SLAB_WORDS, key${u} % BLOCK_SIZE, c);`,
)}
${rep(perLane, (u) =>
  rep(G, (g) => {
    const [a0, a1] = accs(g);
    return `      {
        let p = select(0.0, s_sh[${g * SC}u + j${u}], ks + ${u * subsets}u < n);
        ${a0} += p * v${u}[0];
        ${a1} += p * v${u}[1];
      }`;
  }),
)}
    }
    workgroupBarrier();
  }

  // Merge the key subsets: a tree over workgroup memory.
${strides
  .map(
    (s) => `  if (ks >= ${s}u && ks < ${Math.min(2 * s, subsets)}u) {
${rep(G, (g) =>
  accs(g)
    .map((a, e) => `    tree_sh[${trIndex(g, e, `ks - ${s}u`)}] = ${a};`)
    .join('\n'),
)}
  }
  workgroupBarrier();
  if (ks + ${s}u < ${Math.min(2 * s, subsets)}u) {
${rep(G, (g) =>
  accs(g)
    .map((a, e) => `    ${a} += tree_sh[${trIndex(g, e, 'ks')}];`)
    .join('\n'),
)}
  }
  workgroupBarrier();`,
  )
  .join('\n')}

${
  o.rotation === undefined
    ? ''
    : `  // Rotated format: the output is H·acc / R, runs of R dims spanning invocations.
  if (ks == 0u) {
${rep(G, (g) =>
  accs(g)
    .map((a, e) => `    q_sh[${g * D4 + e}u + 2u * c] = ${a};`)
    .join('\n'),
)}
  }
  workgroupBarrier();
${rotateQSh(o.rotation, G * o.headDim, WG)}
  if (ks == 0u) {
${rep(G, (g) =>
  accs(g)
    .map((a, e) => `    ${a} = q_sh[${g * D4 + e}u + 2u * c];`)
    .join('\n'),
)}
  }`
}
  if (ks == 0u) {
${outputs}
  }
}
`;
}
