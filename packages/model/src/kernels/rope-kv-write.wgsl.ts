/** Shape of the fused RoPE + cache-write kernel. */
export interface RopeKvWriteOptions {
  readonly numHeads: number;
  readonly numKvHeads: number;
  readonly headDim: number;
  readonly blockSize: number;
  readonly f16: boolean;
  readonly rowWords: number;
  readonly slabWords: number;
  readonly blockWords: number;
  /**
   * `false`: only rotate Q and K in place (K/V are then written by a format-specific writer,
   * e.g. a quantized one); bindings 2, 3 and 7 are absent.
   */
  readonly write?: boolean;
  /**
   * `false`: a NoPE layer: Q stays as it is and K is written unrotated (only with `write`; a
   * NoPE layer without the fused write needs no kernel at all).
   */
  readonly rotate?: boolean;
  /**
   * Leading dims of a head that rotate (partial rotary; the cos/sin tables hold
   * `rotaryDim / 2` pairs a position). Default: the whole head.
   */
  readonly rotaryDim?: number;
  /** What Q's rotated dims are multiplied by (LongRoPE's attention factor squared; default 1). */
  readonly qScale?: number;
}

/** A WGSL f32 literal that reads back as `x` exactly. */
function f32Literal(x: number): string {
  const s = Math.fround(x).toPrecision(9);
  return /[.e]/.test(s) ? s : `${s}.0`;
}

/**
 * Rotates Q in place (rotate-half RoPE from f32 cos/sin tables) and writes rotated K and V of
 * each token into its cache slot (f32 words, or f16 pairs with element 2i in the low half);
 * slot -1 skips the write. A workgroup per token. Bindings: 0 q (rw), 1 k, 2 v, 3 cache (rw),
 * 4 cos, 5 sin, 6 positions, 7 slots. Dispatch `(T)`.
 */
export function ropeKvWriteWgsl(o: RopeKvWriteOptions): string {
  if (o.write === false) return ropeOnlyWgsl(o);
  const rotate = o.rotate !== false;
  const half = (o.rotaryDim ?? o.headDim) / 2;
  const d = o.headDim;
  const store = o.f16
    ? /* wgsl */ `
    let e = 2u * c;
    let k0 = kRot(base, e, pos);
    let k1 = kRot(base, e + 1u, pos);
    cache[kWord + c] = pack2x16float(vec2<f32>(k0, k1));
    cache[vWord + c] = pack2x16float(vec2<f32>(v[base + e], v[base + e + 1u]));`
    : /* wgsl */ `
    cache[kWord + c] = bitcast<u32>(kRot(base, c, pos));
    cache[vWord + c] = bitcast<u32>(v[base + c]);`;
  return /* wgsl */ `
const D: u32 = ${d}u;
const HALF: u32 = ${half}u;
const HQ: u32 = ${o.numHeads}u;
const HKV: u32 = ${o.numKvHeads}u;
const BS: u32 = ${o.blockSize}u;
const ROW_WORDS: u32 = ${o.rowWords}u;
const SLAB_WORDS: u32 = ${o.slabWords}u;
const BLOCK_WORDS: u32 = ${o.blockWords}u;
const ROTATE: bool = ${rotate};
const Q_SCALE: f32 = ${f32Literal(o.qScale ?? 1)};
@group(0) @binding(0) var<storage, read_write> q: array<f32>;
@group(0) @binding(1) var<storage, read> k: array<f32>;
@group(0) @binding(2) var<storage, read> v: array<f32>;
@group(0) @binding(3) var<storage, read_write> cache: array<u32>;
@group(0) @binding(4) var<storage, read> cosT: array<f32>;
@group(0) @binding(5) var<storage, read> sinT: array<f32>;
@group(0) @binding(6) var<storage, read> positions: array<i32>;
@group(0) @binding(7) var<storage, read> slots: array<i32>;

fn kRot(base: u32, e: u32, pos: u32) -> f32 {
  if (!ROTATE || e >= 2u * HALF) { return k[base + e]; }
  let i = e % HALF;
  let c = cosT[pos * HALF + i];
  let s = sinT[pos * HALF + i];
  if (e < HALF) { return k[base + e] * c - k[base + e + HALF] * s; }
  return k[base + e] * c + k[base + e - HALF] * s;
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let t = wid.x;
  let pos = u32(positions[t]);
  // A NoPE layer's loop runs no iteration but still binds cos/sin (one bind group layout).
  for (var w = lid; w < ${rotate ? 'HQ * HALF' : '0u'}; w += 64u) {
    let h = w / HALF;
    let i = w % HALF;
    let b = t * HQ * D + h * D;
    let c = cosT[pos * HALF + i];
    let s = sinT[pos * HALF + i];
    let x0 = q[b + i];
    let x1 = q[b + i + HALF];
    q[b + i] = (x0 * c - x1 * s) * Q_SCALE;
    q[b + i + HALF] = (x1 * c + x0 * s) * Q_SCALE;
  }
  let slot = slots[t];
  if (slot < 0) { return; }
  let blk = u32(slot) / BS;
  let off = u32(slot) % BS;
  for (var w = lid; w < HKV * ROW_WORDS; w += 64u) {
    let kh = w / ROW_WORDS;
    let c = w % ROW_WORDS;
    let base = t * HKV * D + kh * D;
    let kWord = blk * BLOCK_WORDS + (2u * kh) * SLAB_WORDS + off * ROW_WORDS;
    let vWord = kWord + SLAB_WORDS;${store}
  }
}
`;
}

function ropeOnlyWgsl(o: RopeKvWriteOptions): string {
  const half = (o.rotaryDim ?? o.headDim) / 2;
  return /* wgsl */ `
const D: u32 = ${o.headDim}u;
const HALF: u32 = ${half}u;
const Q_SCALE: f32 = ${f32Literal(o.qScale ?? 1)};
const HQ: u32 = ${o.numHeads}u;
const HKV: u32 = ${o.numKvHeads}u;
@group(0) @binding(0) var<storage, read_write> q: array<f32>;
@group(0) @binding(1) var<storage, read_write> k: array<f32>;
@group(0) @binding(4) var<storage, read> cosT: array<f32>;
@group(0) @binding(5) var<storage, read> sinT: array<f32>;
@group(0) @binding(6) var<storage, read> positions: array<i32>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let t = wid.x;
  let pos = u32(positions[t]);
  for (var w = lid; w < (HQ + HKV) * HALF; w += 64u) {
    let h = w / HALF;
    let i = w % HALF;
    let c = cosT[pos * HALF + i];
    let s = sinT[pos * HALF + i];
    if (h < HQ) {
      let b = t * HQ * D + h * D;
      let x0 = q[b + i];
      let x1 = q[b + i + HALF];
      q[b + i] = (x0 * c - x1 * s) * Q_SCALE;
      q[b + i + HALF] = (x1 * c + x0 * s) * Q_SCALE;
    } else {
      let b = t * HKV * D + (h - HQ) * D;
      let x0 = k[b + i];
      let x1 = k[b + i + HALF];
      k[b + i] = x0 * c - x1 * s;
      k[b + i + HALF] = x1 * c + x0 * s;
    }
  }
}
`;
}
