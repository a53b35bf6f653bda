// The KV element format contract. Types only: the formats, the registry and the kernels import
// this file, and it imports none of them.

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

/** The two OCP FP8 encodings. */
export type Fp8 = 'fp8-e4m3' | 'fp8-e5m2';
