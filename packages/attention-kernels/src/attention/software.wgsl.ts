/**
 * The `'software'` kernel: WGSL of paged attention shaped for software adapters, for decode
 * pass 1 (pass 2, the split-K merge, is shared with the other decode kernels in
 * decode/split-k-reduce.wgsl.ts) and for prefill.
 *
 * One invocation per (sequence, split, KV head × head chunk) in decode, or per (a few new
 * tokens, KV head × head chunk) in prefill, walks its keys alone: it reads each K row once for
 * all its rows (the query heads of its chunk, times its tokens in prefill), updates their online
 * softmax, and reads the V row once. There is no workgroup memory and no barrier. On llvmpipe a
 * barrier turns the shader into coroutines whose live values sit in a heap frame, so every
 * global load (a per-lane loop there) round-trips through memory; without one, the same loads
 * stay in registers and run at the streaming kernel's rate. A CPU has 8 lanes per core to fill,
 * not thousands: the batch, the KV heads and split-K give enough invocations.
 *
 * In decode the invocations of a workgroup share (sequence, split), so the key loop's bound is
 * uniform; in prefill they cover consecutive tokens, whose bounds differ by a few keys.
 * Keys go in groups ({@link SOFTWARE_KEY_GROUP}, {@link SOFTWARE_PREFILL_KEY_GROUP}): the group's
 * scores, one rescale of the running sums and outputs per group, then the group's V rows. Keys past the split's end read the
 * last key (every load stays in bounds, no branch) and score MASK, so they add nothing.
 */
import {
  type AttentionShaderOptions,
  f32Literal,
  kvLoadFn,
  MASK,
  pass1Bindings,
  rep,
  rowInverse,
  scoreExpr,
  sinksDecl,
  windowMask,
  windowStart,
} from './shader-common.wgsl.js';

/** Invocations per workgroup: one SIMD vector of llvmpipe (8 lanes of 32 bits on AVX2). */
export const SOFTWARE_WORKGROUP = 8;
/**
 * Keys per rescale of the running state, decode. On llvmpipe (GQA 32/8, d128) groups of 2, 4
 * and 8 run within 5% of each other, 1 about 5% slower; the unrolled code, and llvmpipe's
 * compile time with it, grows with the group (first dispatch 4.4, 5.6 and 8.7 s for 1, 2, 4).
 */
export const SOFTWARE_KEY_GROUP = 2;
/**
 * Keys per rescale, prefill: its rows are already many (tokens × heads), and compile time grows
 * faster than linearly with rows × keys.
 */
export const SOFTWARE_PREFILL_KEY_GROUP = 1;
/**
 * Query rows (tokens × heads of one group) per prefill invocation: each K/V row read serves
 * them all. On llvmpipe, 2,048-token prefill at GQA 8/2, d128: 11.2, 14.9 and 23.5 GFLOP/s with
 * 4, 8 and 16 rows (the tiled kernel 7.7–9.5 in the same runs), but llvmpipe's first dispatch
 * (its compile) took 18 s with 8 rows and 78 s with 16 (2.8 s for the tiled kernel).
 */
export const SOFTWARE_PREFILL_ROWS = 8;

/** Nested `max` of the expressions (a balanced tree). */
function maxOf(xs: readonly string[]): string {
  if (xs.length === 1) return xs[0]!;
  const h = xs.length >> 1;
  return `max(${maxOf(xs.slice(0, h))}, ${maxOf(xs.slice(h))})`;
}

/**
 * Pass-1 shader source, every mode. Decode: invocation (unit, split, sequence) at global id
 * (x, y, z). Prefill: invocation x is (work item x / UNITS, unit x % UNITS), a work item being
 * up to `tokensPerWorkgroup` consecutive new tokens of one sequence (`params.chunk_tokens` work
 * items), its rows those tokens × the unit's query heads, row (token t) masked past key
 * `past + t`. Rows and head-dim chunks are unrolled into named values: dynamically indexed
 * private arrays become memory with a per-lane loop on software adapters.
 */
export function softwareAttentionShader(o: AttentionShaderOptions): string {
  const prefill = o.mode === 'prefill';
  const D4 = o.headDim / 4;
  const HG = o.headsPerWorkgroup;
  const TOK = prefill ? o.tokensPerWorkgroup : 1;
  // Row g = token (g / HG) of the work item, query head head0 + g % HG.
  const GW = HG * TOK;
  const tokOf = (g: number): number => Math.floor(g / HG);
  const headChunks = o.numQHeads / o.numKvHeads / HG;
  const chunks = o.headDim / 8;
  const KG = prefill ? SOFTWARE_PREFILL_KEY_GROUP : SOFTWARE_KEY_GROUP;
  const load = kvLoadFn(o);
  const R = o.rotation;
  const split = o.mode === 'decode-split';
  const keys = Array.from({ length: KG }, (_, j) => j);

  // Rotated formats: H / R on each run of R floats of a row held as named vec4s.
  const rotate = (name: (i: number) => string): string => {
    if (R === undefined) return '';
    const rv = R / 4;
    return rep(
      D4 / rv,
      (run) => `  {
    let y = kv_rot(array<vec4<f32>, ${rv}>(${rep(rv, (i) => name(run * rv + i), ', ')}));
${rep(rv, (i) => `    ${name(run * rv + i)} = y[${i}] * ${f32Literal(1 / R)};`)}
  }`,
    );
  };

  // The output of row g: normalized, or (split-K) unnormalized with its (max, sum) for pass 2.
  const writeRow = (g: number): string =>
    prefill
      ? `  if (${tokOf(g)}u < n_tok) {
    ${rowInverse(o, `head0 + ${g % HG}u`, `m${g}`, `l${g}`)}
    let row = (q_row0 + ${tokOf(g)}u) * NUM_Q_HEADS + head0 + ${g % HG}u;
${rep(D4, (i) => `    out[row * D4 + ${i}u] = a${g}_${i} * inv;`)}
  }`
      : split
        ? `  {
    let row = (seq * NUM_Q_HEADS + head0 + ${g}u) * params.max_splits + split;
${rep(D4, (i) => `    out[row * D4 + ${i}u] = a${g}_${i};`)}
    ml[row] = vec2<f32>(m${g}, l${g});
  }`
        : `  {
    ${rowInverse(o, `head0 + ${g}u`, `m${g}`, `l${g}`)}
    let row = seq * NUM_Q_HEADS + head0 + ${g}u;
${rep(D4, (i) => `    out[row * D4 + ${i}u] = a${g}_${i} * inv;`)}
  }`;

  // Where key j of the group lives (keys past the split's end read the last key).
  const locateKey = (j: number): string => `    let key${j} = min(k0 + ${j}u, key_end - 1u);
    let slab${j} = meta_[bt + key${j} / BLOCK_SIZE] * BLOCK_WORDS + 2u * kvh * SLAB_WORDS;
    let t${j} = key${j} % BLOCK_SIZE;`;

  // Row g's online softmax over the group: the new max, a probability per key, and one rescale
  // of the running sum and output.
  const softmax = (g: number): string => `${rep(
    KG,
    (j) =>
      `    let s${g}_${j} = select(${scoreExpr(o, `d${g}_${j}`)}, MASK, k0 + ${j}u >= ${prefill ? `lim${tokOf(g)}` : 'key_end'}${windowMask(o, `k0 + ${j}u`, prefill ? `lim${tokOf(g)}` : 'ctx')});`,
  )}
    let mn${g} = max(m${g}, ${maxOf(keys.map((j) => `s${g}_${j}`))});
    let alpha${g} = exp2(m${g} - mn${g});
${rep(KG, (j) => `    let p${g}_${j} = exp2(s${g}_${j} - mn${g});`)}
    m${g} = mn${g};
    l${g} = l${g} * alpha${g} + ${keys.map((j) => `p${g}_${j}`).join(' + ')};
${rep(D4, (i) => `    a${g}_${i} *= alpha${g};`)}`;

  // Key j's scores against every row: one K row read for all of them.
  const scoreKey = (j: number): string => `${rep(GW, (g) => `    var d${g}_${j} = 0.0;`)}
${rep(
  chunks,
  (c) => `    {
      let k8 = ${load}(slab${j}, t${j}, ${c}u);
${rep(GW, (g) => `      d${g}_${j} += dot(q${g}_${2 * c}, k8[0]) + dot(q${g}_${2 * c + 1}, k8[1]);`)}
    }`,
)}`;
  // Key j's V row into every row's output.
  const valueKey = (j: number): string => `    {
      let vslab = slab${j} + SLAB_WORDS;
${rep(
  chunks,
  (c) => `      {
        let v8 = ${load}(vslab, t${j}, ${c}u);
${rep(GW, (g) => `        a${g}_${2 * c} += p${g}_${j} * v8[0];\n        a${g}_${2 * c + 1} += p${g}_${j} * v8[1];`)}
      }`,
)}
    }`;
  const locateDecode = `  // Unit = KV head × head chunk; its rows are query heads head0 .. head0 + ${HG - 1}.
  let unit = gid.x;
  let split = gid.y;
  let seq = gid.z;
  if (unit >= UNITS) {
    return;
  }
  let ctx = meta_[params.ctx_offset + seq];
  var key_begin = split * params.chunk_tokens;
  // A short sequence's splits past its last key have nothing to do (pass 2 skips them).
  if (key_begin >= ctx && split > 0u) {
    return;
  }
  let key_end = min(ctx, key_begin + params.chunk_tokens);
${windowStart(o, 'ctx')}`;
  const locatePrefill = `  let unit = gid.x % UNITS;
  let item = gid.x / UNITS;
  if (item >= params.chunk_tokens) {
    return;
  }
  let seq = meta_[2u * item];
  let tok0 = meta_[2u * item + 1u];
  let q_len = meta_[params.qlen_offset + seq];
  let ctx = meta_[params.ctx_offset + seq];
  let past = ctx - q_len;
  let n_tok = min(${TOK}u, q_len - tok0);
  let q_row0 = meta_[params.qstart_offset + seq] + tok0;
  var key_begin = 0u;
  // Keys up to the causal bound of the item's last token; row (token t) sees past + t + 1.
  let key_end = past + tok0 + n_tok;
${rep(TOK, (t) => `  let lim${t} = past + tok0 + ${t + 1}u;`)}
${windowStart(o, 'lim0')}`;
  return /* wgsl */ `
${pass1Bindings(o.mode)}
${sinksDecl(o)}

const D4: u32 = ${D4}u;
const HEAD_CHUNKS: u32 = ${headChunks}u;
const UNITS: u32 = ${o.numKvHeads * headChunks}u;
const NUM_Q_HEADS: u32 = ${o.numQHeads}u;
const BLOCK_SIZE: u32 = ${o.blockSize}u;
const SLAB_WORDS: u32 = ${o.slabWords}u;
const BLOCK_WORDS: u32 = ${o.blockWords}u;
const MASK: f32 = ${MASK};

${o.kvLoad}

@compute @workgroup_size(${SOFTWARE_WORKGROUP})
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
${prefill ? locatePrefill : locateDecode}
  let kvh = unit / HEAD_CHUNKS;
  let head0 = unit * ${HG}u;
  let bt = params.bt_offset + seq * params.max_blocks;

${rep(GW, (g) => rep(D4, (i) => `  var q${g}_${i} = ${prefill ? `select(vec4<f32>(0.0), query[((q_row0 + ${tokOf(g)}u) * NUM_Q_HEADS + head0 + ${g % HG}u) * D4 + ${i}u], ${tokOf(g)}u < n_tok)` : `query[(seq * NUM_Q_HEADS + head0 + ${g}u) * D4 + ${i}u]`} * ${f32Literal(o.qScale)};`))}
${rep(GW, (g) => rotate((i) => `q${g}_${i}`))}
${rep(GW, (g) => `  var m${g} = MASK;\n  var l${g} = 0.0;\n${rep(D4, (i) => `  var a${g}_${i} = vec4<f32>(0.0);`)}`)}

  for (var k0 = key_begin; k0 < key_end; k0 += ${KG}u) {
${rep(KG, locateKey)}
${rep(KG, scoreKey)}
${rep(GW, softmax)}
${rep(KG, valueKey)}
  }

${rep(GW, (g) => rotate((i) => `a${g}_${i}`))}
${rep(GW, writeRow)}
}
`;
}
