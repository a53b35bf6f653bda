import { f16BitsToF32, f32ToF16Bits, roundToF16 } from '@kvasir/quantizer';
import { AttentionKernelError } from './errors.js';
import { QUANTIZED_KV_FORMATS } from './kv-format-quantized.js';

/**
 * How a kernel declared the cache binding its format functions read or write: the binding's
 * name and its element type (`array<u32>` or `array<vec4<u32>>`).
 */
export interface KvWgslOptions {
  readonly headDim: number;
  readonly blockSize: number;
  /** Name of the cache binding (default `'kv'`). */
  readonly cacheVar?: string;
  /** Element type of the cache binding (default `'vec4<u32>'` for loads, `'u32'` for stores). */
  readonly cacheElement?: 'u32' | 'vec4<u32>';
  /**
   * How loads widen IEEE halves to f32 (formats that store halves): `'builtin'` (default)
   * with `unpack2x16float`, or `'integer'` with exact integer arithmetic (normals, subnormals,
   * signed zeros, infinities and NaNs alike). llvmpipe lowers `unpack2x16float` to about 17
   * vector instructions per half; the integer form takes about 8 and made f16 decode 1.2×
   * faster there. On GPUs the builtin is one instruction.
   */
  readonly f16Unpack?: F16Unpack;
}

/** See {@link KvWgslOptions.f16Unpack}. */
export type F16Unpack = 'builtin' | 'integer';

/**
 * WGSL of `kv_unpack8(p: vec4<u32>) -> array<vec4<f32>, 2>`: the 8 halves packed in `p`
 * (element `2i` in the low half of word `i`) as f32, by `mode` (see {@link KvWgslOptions.f16Unpack}).
 */
export function f16UnpackWgsl(mode: F16Unpack = 'builtin'): string {
  if (mode === 'builtin') {
    return /* wgsl */ `
fn kv_unpack8(p: vec4<u32>) -> array<vec4<f32>, 2> {
  return array<vec4<f32>, 2>(
    vec4<f32>(unpack2x16float(p.x), unpack2x16float(p.y)),
    vec4<f32>(unpack2x16float(p.z), unpack2x16float(p.w)));
}
`;
  }
  // Magnitude bits m (15 bits) and the sign already in place: a normal half is the f32 with
  // the exponent rebiased by 112 (m << 13 plus 112 << 23), a subnormal is m * 2^-24 exactly,
  // and an infinity or NaN (m >= 0x7c00) needs the exponent rebiased once more, to 255.
  return /* wgsl */ `
fn kv_half_bits(m: vec4<u32>, sign: vec4<u32>) -> vec4<f32> {
  let normal = (m << vec4<u32>(13u)) + vec4<u32>(0x38000000u);
  let sub = bitcast<vec4<u32>>(vec4<f32>(m) * 5.9604645e-8);
  var b = select(normal, sub, m < vec4<u32>(0x400u));
  b = select(b, normal + vec4<u32>(0x38000000u), m >= vec4<u32>(0x7c00u));
  return bitcast<vec4<f32>>(b | sign);
}
fn kv_unpack8(p: vec4<u32>) -> array<vec4<f32>, 2> {
  let lo = kv_half_bits(p & vec4<u32>(0x7fffu), (p & vec4<u32>(0x8000u)) << vec4<u32>(16u));
  let hi = kv_half_bits((p >> vec4<u32>(16u)) & vec4<u32>(0x7fffu), p & vec4<u32>(0x80000000u));
  return array<vec4<f32>, 2>(vec4<f32>(lo.x, hi.x, lo.y, hi.y), vec4<f32>(lo.z, hi.z, lo.w, hi.w));
}
`;
}

/**
 * A KV element format: how one (token, head) row of `headDim` elements is stored in 32-bit
 * words of a layer's cache buffer, on the CPU and in WGSL.
 *
 * Kernels are generated from a format without knowing its encoding: they call the WGSL
 * functions it supplies, all addressed by `slab` (the word where a (block, head, K|V) slab
 * starts), `t` (the token row in the slab) and an element chunk index.
 *
 * Load functions ({@link KvFormat.wgslLoad}):
 * - `fn kv_load8(slab: u32, t: u32, c: u32) -> array<vec4<f32>, 2>`: elements `8c .. 8c+7`;
 * - `fn kv_load4(slab: u32, t: u32, q: u32) -> vec4<f32>`: elements `4q .. 4q+3`.
 *
 * Store functions ({@link KvFormat.wgslStore}); the kernel defines `fn kv_src(e: u32) -> f32`
 * returning element `e` of the row being written:
 * - `const KV_STORE_CHUNK: u32`: elements written by one `kv_store_chunk` call (one invocation
 *   owns whole words, so chunks never share a word);
 * - `fn kv_store_chunk(slab: u32, t: u32, c: u32, scale: f32)`: encodes elements
 *   `c*KV_STORE_CHUNK ..` of the row;
 * - `fn kv_row_scale(absmax: f32) -> f32` and `fn kv_store_scale(slab: u32, t: u32, scale: f32)`:
 *   used only when {@link KvFormat.rowScaled} (the kernel reduces the row's absolute maximum
 *   first); quantized formats keep their scales in the slab's last `scaleWordsPerSlab` words.
 *
 * Rotated formats ({@link KvFormat.rotation} = R) store each run of R elements rotated by an
 * unnormalized Walsh–Hadamard transform H (H·H = R·I). Their load WGSL also defines
 * `fn kv_load8_rotated(slab, t, c) -> array<vec4<f32>, 2>` (the rotated-domain values y, so that
 * a row is H·y / R, without the transform) and `fn kv_rot(x: array<vec4<f32>, R / 4>) ->
 * array<vec4<f32>, R / 4>` (H on one run). Attention kernels then rotate the query once
 * (q·(H·y / R) = (H·q / R)·y) and the output once (Σ p·H·y / R = H·(Σ p·y) / R) instead of every
 * K and V row, so decode costs what the unrotated format's does.
 *
 * Contract for new (quantized) formats: `headDim` elements per row in `rowWords(headDim)` words,
 * `blockSize * rowWords + scaleWordsPerSlab` a multiple of 4 words (pad the scale area), so slabs
 * and rows stay 16-byte aligned for `vec4<u32>` loads.
 */
export interface KvFormat {
  /** Stable name (`'f32'`, `'f16'`, later `'int8'` ...), part of cache fingerprints. */
  readonly name: string;
  /** True when the writer must compute a per-(token, head) scale from the row's absmax. */
  readonly rowScaled: boolean;
  /**
   * The WGSL `KV_STORE_CHUNK` value, so writers can size their dispatch to one invocation per
   * chunk. Optional: writers assume 1 (and over-dispatch) when a format leaves it out.
   */
  readonly storeChunk?: number;
  /** Words of one row of `headDim` elements. */
  rowWords(headDim: number): number;
  /** Scale / zero-point words at the end of each slab (0 for f32 and f16). */
  scaleWordsPerSlab(blockSize: number, headDim: number): number;
  /** Run length R of a rotated format (see the interface doc); undefined for the others. */
  readonly rotation?: 8 | 32;
  /** Whether this format has kernels for `headDim` (row sizes must split into 8-element chunks). */
  supportsHeadDim(headDim: number): boolean;
  /** WGSL defining `kv_load8` and `kv_load4` (see the interface doc). */
  wgslLoad(options: KvWgslOptions): string;
  /** WGSL defining `KV_STORE_CHUNK`, `kv_store_chunk`, `kv_row_scale`, `kv_store_scale`. */
  wgslStore(options: KvWgslOptions): string;
  /**
   * Encode `row` (headDim floats) into token `t` of the slab starting at word `slabStart`
   * (computing and storing its scale for scaled formats), exactly as the GPU writer does.
   */
  encodeRow(
    cache: Uint32Array,
    slabStart: number,
    t: number,
    row: Float32Array,
    blockSize: number,
  ): void;
  /**
   * Decode token `t` of the slab starting at `slabStart` into `out` (headDim floats). Formats
   * with scales need `blockSize` to find them; pass it always.
   */
  decodeRow(
    cache: Uint32Array,
    slabStart: number,
    t: number,
    out: Float32Array,
    blockSize?: number,
  ): void;
}

// The conversions live with the other number formats in @kvasir/quantizer; re-exported here
// for the kernels' existing users.
export { f16BitsToF32, f32ToF16Bits, roundToF16 };

function wordRead(o: KvWgslOptions, cacheVar: string): (w: string) => string {
  return (o.cacheElement ?? 'vec4<u32>') === 'vec4<u32>'
    ? (w) => `${cacheVar}[(${w}) >> 2u][(${w}) & 3u]`
    : (w) => `${cacheVar}[${w}]`;
}

function quadRead(o: KvWgslOptions, cacheVar: string): (w: string) => string {
  if ((o.cacheElement ?? 'vec4<u32>') === 'vec4<u32>') return (w) => `${cacheVar}[(${w}) >> 2u]`;
  return (w) =>
    `vec4<u32>(${cacheVar}[${w}], ${cacheVar}[(${w}) + 1u], ${cacheVar}[(${w}) + 2u], ${cacheVar}[(${w}) + 3u])`;
}

function checkHeadDim(format: KvFormat, headDim: number): void {
  if (!format.supportsHeadDim(headDim)) {
    throw new AttentionKernelError(
      'UNSUPPORTED_HEAD_DIM',
      `KV format ${format.name} has no kernel for head dim ${headDim} (needs a positive multiple of 8).`,
      { details: { headDim, format: format.name } },
    );
  }
}

const multipleOf8 = (d: number): boolean => Number.isInteger(d) && d > 0 && d % 8 === 0;

/**
 * The start of an unscaled format's store functions: checks the head dim and the cache binding
 * type, and returns the cache variable plus the scale hooks that do nothing for such formats.
 */
function unscaledStorePrelude(format: KvFormat, o: KvWgslOptions): { v: string; wgsl: string } {
  checkHeadDim(format, o.headDim);
  if ((o.cacheElement ?? 'u32') !== 'u32') {
    throw new AttentionKernelError(
      'INVALID_ARGUMENT',
      `${format.name} stores need an array<u32> cache binding.`,
    );
  }
  return {
    v: o.cacheVar ?? 'kv',
    wgsl: /* wgsl */ `
const KV_STORE_CHUNK: u32 = 4u;
fn kv_row_scale(absmax: f32) -> f32 { return 1.0; }
fn kv_store_scale(slab: u32, t: u32, scale: f32) {}`,
  };
}

/** 32-bit floats, one element per word. */
export const f32Format: KvFormat = {
  name: 'f32',
  rowScaled: false,
  storeChunk: 4,
  rowWords: (headDim) => headDim,
  scaleWordsPerSlab: () => 0,
  supportsHeadDim: multipleOf8,
  wgslLoad(o) {
    checkHeadDim(this, o.headDim);
    const v = o.cacheVar ?? 'kv';
    const quad = quadRead(o, v);
    return /* wgsl */ `
fn kv_load4(slab: u32, t: u32, q: u32) -> vec4<f32> {
  return bitcast<vec4<f32>>(${quad(`slab + t * ${o.headDim}u + 4u * q`)});
}
fn kv_load8(slab: u32, t: u32, c: u32) -> array<vec4<f32>, 2> {
  let w = slab + t * ${o.headDim}u + 8u * c;
  return array<vec4<f32>, 2>(bitcast<vec4<f32>>(${quad('w')}), bitcast<vec4<f32>>(${quad('w + 4u')}));
}
`;
  },
  wgslStore(o) {
    const { v, wgsl } = unscaledStorePrelude(this, o);
    return /* wgsl */ `${wgsl}
fn kv_store_chunk(slab: u32, t: u32, c: u32, scale: f32) {
  let w = slab + t * ${o.headDim}u + 4u * c;
  for (var j = 0u; j < 4u; j++) { ${v}[w + j] = bitcast<u32>(kv_src(4u * c + j)); }
}
`;
  },
  encodeRow(cache, slabStart, t, row) {
    const base = slabStart + t * row.length;
    const f = new Float32Array(cache.buffer, cache.byteOffset, cache.length);
    for (let i = 0; i < row.length; i++) f[base + i] = row[i]!;
  },
  decodeRow(cache, slabStart, t, out) {
    const base = slabStart + t * out.length;
    const f = new Float32Array(cache.buffer, cache.byteOffset, cache.length);
    for (let i = 0; i < out.length; i++) out[i] = f[base + i]!;
  },
};

/**
 * IEEE half floats packed two per word with `pack2x16float` (element `2i` in the low half), so
 * kernels run without the `shader-f16` feature; arithmetic stays f32.
 */
export const f16Format: KvFormat = {
  name: 'f16',
  rowScaled: false,
  storeChunk: 4,
  rowWords: (headDim) => headDim / 2,
  scaleWordsPerSlab: () => 0,
  supportsHeadDim: multipleOf8,
  wgslLoad(o) {
    checkHeadDim(this, o.headDim);
    const v = o.cacheVar ?? 'kv';
    const quad = quadRead(o, v);
    const word = wordRead(o, v);
    const rw = o.headDim / 2;
    return /* wgsl */ `${f16UnpackWgsl(o.f16Unpack)}
fn kv_load4(slab: u32, t: u32, q: u32) -> vec4<f32> {
  let w = slab + t * ${rw}u + 2u * q;
  return vec4<f32>(unpack2x16float(${word('w')}), unpack2x16float(${word('w + 1u')}));
}
fn kv_load8(slab: u32, t: u32, c: u32) -> array<vec4<f32>, 2> {
  return kv_unpack8(${quad(`slab + t * ${rw}u + 4u * c`)});
}
`;
  },
  wgslStore(o) {
    const { v, wgsl } = unscaledStorePrelude(this, o);
    return /* wgsl */ `${wgsl}
fn kv_store_chunk(slab: u32, t: u32, c: u32, scale: f32) {
  let w = slab + t * ${o.headDim / 2}u + 2u * c;
  ${v}[w] = pack2x16float(vec2<f32>(kv_src(4u * c), kv_src(4u * c + 1u)));
  ${v}[w + 1u] = pack2x16float(vec2<f32>(kv_src(4u * c + 2u), kv_src(4u * c + 3u)));
}
`;
  },
  encodeRow(cache, slabStart, t, row) {
    const base = slabStart + (t * row.length) / 2;
    for (let i = 0; i < row.length; i += 2) {
      cache[base + i / 2] = (f32ToF16Bits(row[i]!) | (f32ToF16Bits(row[i + 1]!) << 16)) >>> 0;
    }
  },
  decodeRow(cache, slabStart, t, out) {
    const base = slabStart + (t * out.length) / 2;
    for (let i = 0; i < out.length; i += 2) {
      const w = cache[base + i / 2]!;
      out[i] = f16BitsToF32(w & 0xffff);
      out[i + 1] = f16BitsToF32(w >>> 16);
    }
  },
};

const FORMATS = new Map<string, KvFormat>([
  ['f32', f32Format],
  ['f16', f16Format],
  ...QUANTIZED_KV_FORMATS.map((f): [string, KvFormat] => [f.name, f]),
]);

/**
 * Register a format (the quantizer adds int8, fp8, int4 this way) so {@link kvFormat} finds it
 * by name.
 */
export function registerKvFormat(format: KvFormat): void {
  FORMATS.set(format.name, format);
}

/**
 * The format named `name`.
 *
 * @throws {AttentionKernelError} `UNSUPPORTED_FORMAT` for an unknown name.
 */
export function kvFormat(name: string): KvFormat {
  const f = FORMATS.get(name);
  if (f === undefined) {
    throw new AttentionKernelError(
      'UNSUPPORTED_FORMAT',
      `Unknown KV format '${name}'; known: ${[...FORMATS.keys()].join(', ')}.`,
    );
  }
  return f;
}
