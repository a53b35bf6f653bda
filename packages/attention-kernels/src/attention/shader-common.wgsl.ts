/**
 * What the paged attention kernels share: the shader options, the params struct and pass-1
 * bindings (one dispatch code binds the same buffers whichever kernel it runs), the score and
 * K/V load expressions, the query rotation of rotated KV formats, and the key range of a
 * decode workgroup.
 */

/** Finite mask value: exp2(MASK - m) underflows to 0 without producing NaN from -inf - -inf. */
export const MASK = '-1.0e30';

/** How pass-1 workgroups find their rows and keys. */
export type AttentionShaderMode = 'decode' | 'decode-split' | 'prefill';

/** What a pass-1 kernel is generated from. */
export interface AttentionShaderOptions {
  readonly mode: AttentionShaderMode;
  readonly headDim: number;
  readonly numQHeads: number;
  readonly numKvHeads: number;
  /** Query heads of one group per workgroup (a divisor of the group size). */
  readonly headsPerWorkgroup: number;
  /** Consecutive tokens per workgroup (1 for decode). */
  readonly tokensPerWorkgroup: number;
  readonly blockSize: number;
  readonly slabWords: number;
  readonly blockWords: number;
  /** f32 multiplier applied to q once (scale, times log2(e) when there is no soft-cap). */
  readonly qScale: number;
  /** Soft-cap, when set: s = tanh(s / cap) * cap, then times log2(e). */
  readonly softCap: number | undefined;
  /**
   * Sliding window, when set: a kernel starts at the first block its rows' windows reach (blocks
   * wholly before are never read) and a key more than `window - 1` positions before its query
   * scores MASK.
   */
  readonly window: number | undefined;
  /** Attention-sink logits per query head in the kernels' exp2 units (times log2(e)), or none. */
  readonly sinks: readonly number[] | undefined;
  /**
   * WGSL defining `fn kv_load8(slab: u32, t: u32, c: u32) -> array<vec4<f32>, 2>` over a
   * binding `kv: array<vec4<u32>>` (a {@link KvFormat}'s `wgslLoad`).
   */
  readonly kvLoad: string;
  /**
   * Run length of a rotated format ({@link KvFormat.rotation}): the kernel reads K and V with
   * `kv_load8_rotated`, rotates the queries once before the key loop and the output once after.
   */
  readonly rotation: number | undefined;
  /**
   * Hold the rows' queries in registers through the key loop (software adapters, where every
   * workgroup-memory load is a per-lane loop) instead of reading them from workgroup memory
   * per key (hardware: 4 heads × head dim 128 in registers is 512 of them per lane, which
   * spills on GPUs; a broadcast workgroup-memory read is nearly free there).
   */
  readonly queryInRegisters: boolean;
  /**
   * 8-element V chunks each V-phase invocation owns: 4 means fewer invocations per key (less
   * redundant exp2), 2 half the accumulator registers (more occupancy on GPUs). A divisor of
   * headDim / 8.
   */
  readonly vChunksPerLane: number;
}

/** `x` as a WGSL f32 literal (rounded to f32, always with a decimal point or exponent). */
export function f32Literal(x: number): string {
  const s = Math.fround(x).toPrecision(9);
  return s.includes('.') || s.includes('e') ? s : `${s}.0`;
}

/** Repeats `f(i)` for i in 0..n-1, one line each (the generator unrolls instead of indexing). */
export function rep(n: number, f: (i: number) => string, sep = '\n'): string {
  return Array.from({ length: n }, (_, i) => f(i)).join(sep);
}

/** Uniform parameters shared by all paged attention passes (8 u32). */
export const PARAMS_STRUCT = `struct Params {
  num_seqs: u32,
  max_blocks: u32,
  ctx_offset: u32,
  chunk_tokens: u32,
  max_splits: u32,
  bt_offset: u32,
  qstart_offset: u32,
  qlen_offset: u32,
}`;

/**
 * The exp2-domain score of a raw dot product `d` (the query already carries the scale, and
 * log2(e) unless there is a soft-cap): `tanh(d / cap) · cap · log2(e)` with a soft-cap.
 */
export function scoreExpr(o: { readonly softCap: number | undefined }, d: string): string {
  return o.softCap === undefined
    ? d
    : `tanh(clamp(${d} * ${f32Literal(1 / o.softCap)}, -15.0, 15.0)) * ${f32Literal(o.softCap * Math.LOG2E)}`;
}

/** The K/V load function a kernel calls: rotated formats are read in their rotated domain. */
export function kvLoadFn(o: { readonly rotation: number | undefined }): string {
  return o.rotation === undefined ? 'kv_load8' : 'kv_load8_rotated';
}

/**
 * WGSL of \`rot_q_sh(run)\`: H·x / R on run \`run\` (R consecutive floats) of the workgroup array
 * \`q_sh\`, through the format's \`kv_rot\`; empty without a rotation.
 */
export function rotateRunFn(rotation: number | undefined): string {
  if (rotation === undefined) return '';
  const rv = rotation / 4;
  return `
fn rot_q_sh(run: u32) {
  var x: array<vec4<f32>, ${rv}>;
  for (var i = 0u; i < ${rv}u; i++) {
    x[i] = q_sh[run * ${rv}u + i];
  }
  let y = kv_rot(x);
  for (var i = 0u; i < ${rv}u; i++) {
    q_sh[run * ${rv}u + i] = y[i] * ${f32Literal(1 / rotation)};
  }
}
`;
}

/** WGSL statements rotating every run of \`floats\` floats of \`q_sh\`, then a barrier. */
export function rotateQSh(
  rotation: number | undefined,
  floats: number,
  invocations: number,
): string {
  if (rotation === undefined) return '';
  return `  for (var r = lane; r < ${floats / rotation}u; r += ${invocations}u) {
    rot_q_sh(r);
  }
  workgroupBarrier();`;
}

/**
 * WGSL statements that start the hardware and subgroup decode kernels (grid: split, KV head ×
 * head chunk, sequence): the workgroup's KV head and first query head, and its key range
 * [key_begin, key_end); workgroups past a short sequence's last split return (uniformly,
 * before any barrier). Expects `wid`, `G` and `HEAD_CHUNKS`.
 */
export function decodeWorkgroupKeys(o: { readonly window: number | undefined }): string {
  return `  let split = wid.x;
  let seq = wid.z;
  let kvh = wid.y / HEAD_CHUNKS;
  let head0 = wid.y * G;
  let ctx = meta_[params.ctx_offset + seq];
  var key_begin = split * params.chunk_tokens;
  // Whole workgroups past a short sequence's last split leave before any barrier.
  if (key_begin >= ctx && split > 0u) {
    return;
  }
  let key_end = min(ctx, key_begin + params.chunk_tokens);
${windowStart(o, 'ctx')}`;
}

/**
 * The params struct and bindings of every pass-1 kernel (both decode shapes and prefill): the
 * dispatch code binds the same buffers whichever kernel it runs.
 */
export function pass1Bindings(mode: AttentionShaderMode): string {
  return `${PARAMS_STRUCT}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> query: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> kv: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read> meta_: array<u32>;
@group(0) @binding(4) var<storage, read_write> out: array<vec4<f32>>;
${mode === 'decode-split' ? '@group(0) @binding(5) var<storage, read_write> ml: array<vec2<f32>>;' : ''}`;
}

/**
 * ` || <key> + WINDOW < <limit>` when the kernel has a sliding window (the key is before the
 * last `window` positions below the exclusive bound `limit`), else nothing: appended to a
 * kernel's mask condition.
 */
export function windowMask(
  o: { readonly window: number | undefined },
  key: string,
  limit: string,
): string {
  return o.window === undefined ? '' : ` || ${key} + ${o.window}u < ${limit}`;
}

/**
 * With a sliding window, the statement that moves `key_begin` up to the first block the window
 * below the exclusive bound `limit` reaches: blocks wholly before it are never read (a block
 * allocator may have released them). Keys of that block before the window are masked by
 * {@link windowMask}. Nothing without a window.
 */
export function windowStart(
  o: { readonly window: number | undefined; readonly blockSize?: number },
  limit: string,
): string {
  if (o.window === undefined) return '';
  return `  key_begin = max(key_begin, select(0u, (${limit} - ${o.window}u) / BLOCK_SIZE * BLOCK_SIZE, ${limit} > ${o.window}u));`;
}

/** The private `SINKS` array of a kernel with attention sinks (declared at module scope). */
export function sinksDecl(o: { readonly sinks: readonly number[] | undefined }): string {
  if (o.sinks === undefined) return '';
  const n = o.sinks.length;
  return `var<private> SINKS: array<f32, ${n}> = array<f32, ${n}>(${o.sinks.map(f32Literal).join(', ')});`;
}

/**
 * WGSL statements defining `<name>`, the factor that turns a row's accumulated output into its
 * attention output: `1 / l` for a row with running max `m` and sum `l` (exp2 units; 0 for a row
 * with no keys), or with attention sinks, `exp2(m - m') / (l · exp2(m - m') + exp2(sink - m'))`
 * with `m' = max(m, sink)`: the sink in the max and the denominator, as one more key with no
 * value.
 */
export function rowInverse(
  o: { readonly sinks: readonly number[] | undefined },
  head: string,
  m: string,
  l: string,
  name = 'inv',
): string {
  if (o.sinks === undefined) {
    return `var ${name} = 0.0;
      if (${l} > 0.0) {
        ${name} = 1.0 / ${l};
      }`;
  }
  return `let ${name}_s = SINKS[${head}];
      let ${name}_m = max(${m}, ${name}_s);
      let ${name}_f = exp2(${m} - ${name}_m);
      let ${name} = ${name}_f / (${l} * ${name}_f + exp2(${name}_s - ${name}_m));`;
}
