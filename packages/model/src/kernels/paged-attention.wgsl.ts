/** Shape of the paged attention kernel. */
export interface PagedAttentionOptions {
  readonly numHeads: number;
  readonly numKvHeads: number;
  readonly headDim: number;
  readonly blockSize: number;
  readonly f16: boolean;
  readonly rowWords: number;
  readonly slabWords: number;
  readonly blockWords: number;
}

/** Keys per tile (= invocations per workgroup). */
export const ATTENTION_TILE = 64;

/**
 * Causal paged attention for every query row of a batch (prefill chunks and decodes alike):
 * a workgroup per (query head, token) walks the token's visible keys in tiles of 64 with an
 * online softmax; each invocation scores one key of the tile, then accumulates its own output
 * dimensions. Block ids are looked up once per key into workgroup memory.
 * Bindings: 0 q, 1 cache, 2 out, 3 params {maxBlocksPerSeq}, 4 tokInfo (u32 pairs: seq,
 * visible keys), 5 blockTables. Dispatch `(numHeads, T)`.
 */
export function pagedAttentionWgsl(o: PagedAttentionOptions): string {
  const T = ATTENTION_TILE;
  const d = o.headDim;
  const dimsPerThread = Math.ceil(d / T);
  const dims = Array.from({ length: dimsPerThread }, (_, i) => i);
  const load = o.f16
    ? (word: string, e: string) => `unpack2x16float(cache[${word} + (${e}) / 2u])[(${e}) % 2u]`
    : (word: string, e: string) => `bitcast<f32>(cache[${word} + ${e}])`;
  const scoreLoop = o.f16
    ? `for (var w = 0u; w < D / 2u; w++) {
        let kv = unpack2x16float(cache[kw + w]);
        s += qs[2u * w] * kv.x + qs[2u * w + 1u] * kv.y;
      }`
    : `for (var e = 0u; e < D; e++) { s += qs[e] * bitcast<f32>(cache[kw + e]); }`;
  return /* wgsl */ `
const D: u32 = ${d}u;
const HQ: u32 = ${o.numHeads}u;
const GROUP: u32 = ${o.numHeads / o.numKvHeads}u;
const BS: u32 = ${o.blockSize}u;
const ROW_WORDS: u32 = ${o.rowWords}u;
const SLAB_WORDS: u32 = ${o.slabWords}u;
const BLOCK_WORDS: u32 = ${o.blockWords}u;
const TILE: u32 = ${T}u;
const SCALE: f32 = ${1 / Math.sqrt(d)};
struct Params { maxBlocks: u32 }
@group(0) @binding(0) var<storage, read> q: array<f32>;
@group(0) @binding(1) var<storage, read> cache: array<u32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<uniform> params: Params;
@group(0) @binding(4) var<storage, read> tokInfo: array<u32>;
@group(0) @binding(5) var<storage, read> blockTables: array<u32>;
var<workgroup> qs: array<f32, ${d}>;
var<workgroup> p: array<f32, ${T}>;
var<workgroup> rowWord: array<u32, ${T}>;
var<workgroup> redMax: array<f32, ${T}>;
var<workgroup> redSum: array<f32, ${T}>;

@compute @workgroup_size(${T})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let h = wid.x;
  let t = wid.y;
  let seq = tokInfo[2u * t];
  let visible = tokInfo[2u * t + 1u];
  let kvh = h / GROUP;
  let qo = (t * HQ + h) * D;
  for (var e = lid; e < D; e += TILE) { qs[e] = q[qo + e]; }
  workgroupBarrier();
  var m = -3.0e38;
  var l = 0.0;
${dims.map((i) => `  var acc${i} = 0.0;`).join('\n')}
  for (var j0 = 0u; j0 < visible; j0 += TILE) {
    let j = j0 + lid;
    var s = -3.0e38;
    if (j < visible) {
      let blk = blockTables[seq * params.maxBlocks + j / BS];
      let kw = blk * BLOCK_WORDS + (2u * kvh) * SLAB_WORDS + (j % BS) * ROW_WORDS;
      rowWord[lid] = kw;
      s = 0.0;
      ${scoreLoop}
      s *= SCALE;
    }
    // Reductions inline and on separate arrays: llvmpipe has been seen to move a read of
    // workgroup memory past the barrier that follows it when the reduction was a function.
    redMax[lid] = s;
    workgroupBarrier();
    for (var r = TILE / 2u; r > 0u; r >>= 1u) {
      if (lid < r) { redMax[lid] = max(redMax[lid], redMax[lid + r]); }
      workgroupBarrier();
    }
    let mNew = max(m, redMax[0]);
    var pj = 0.0;
    if (j < visible) { pj = exp(s - mNew); }
    p[lid] = pj;
    redSum[lid] = pj;
    workgroupBarrier();
    for (var r = TILE / 2u; r > 0u; r >>= 1u) {
      if (lid < r) { redSum[lid] += redSum[lid + r]; }
      workgroupBarrier();
    }
    let alpha = exp(m - mNew);
    l = l * alpha + redSum[0];
    m = mNew;
    let n = min(TILE, visible - j0);
${dims
  .map(
    (i) => `    {
      let e = lid + ${i * T}u;
      var a = acc${i} * alpha;
      if (e < D) {
        for (var jj = 0u; jj < n; jj++) { a += p[jj] * ${load('rowWord[jj] + SLAB_WORDS', 'e')}; }
      }
      acc${i} = a;
    }`,
  )
  .join('\n')}
    workgroupBarrier();
  }
  // l > 0 always (the query's own key is visible); guard anyway against an empty context.
  let inv = select(0.0, 1.0 / l, l > 0.0);
${dims.map((i) => `  if (lid + ${i * T}u < D) { out[qo + lid + ${i * T}u] = acc${i} * inv; }`).join('\n')}
}
`;
}
