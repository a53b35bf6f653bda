// WGSL decoders of the GGML block formats, bit for bit the CPU dequantizers.
//
// Layout on the GPU: the tensor's bytes exactly as in the GGUF file (rows of contiguous blocks,
// no repacking, the bits kept), uploaded into an `array<u32>` storage binding (padded with zeros
// to a multiple of 4 bytes). Most block sizes are not multiples of 4 bytes (Q4_0 and IQ4_NL 18,
// Q5_0 22, Q8_0 34, Q3_K 110, Q6_K 210), so a block starts at any byte: every decoder takes the
// block's *byte* offset and reads its fields a byte at a time (`<p>_u8`), little-endian, f16
// scales included, at no alignment assumption. A loader that prefers aligned loads may pad each
// block to a multiple of 4 bytes (Q4_0 to 20) and pass offsets at that stride: the decoders read
// the same fields.
//
// Arithmetic as the CPU: each value is one rounding of `(d · sc) · q − dmin · m` whose products
// are exact in f32, so fused multiply-adds and either association give the same bits; the f16
// scales are decoded from their bits (subnormals kept, no `unpack2x16float`, which a GPU may
// flush).

import { checkBlocks } from './block-io.js';
import { IQ4_NL_VALUES } from './iq4-nl.js';
import { MXFP4_VALUES } from './mxfp4.js';
import { GGML_BLOCK_FORMATS, type GgmlBlockType } from './types.js';

/** Where a GGML decoder reads its blocks. */
export interface WgslGgmlOptions {
  /** The `array<u32>` storage binding holding the blocks (declared by the caller). */
  readonly buffer: string;
  /** Prefix of the generated functions (default `ggml`); distinct per buffer. */
  readonly prefix?: string;
}

/** Name of the WGSL function `fn <name>(block: u32, i: u32) -> f32` decoding weight `i` of a block. */
export function wgslGgmlDecodeName(type: GgmlBlockType, prefix = 'ggml'): string {
  return `${prefix}_${type.toLowerCase()}`;
}

/**
 * WGSL byte readers over `options.buffer`: `<p>_u8(b)`, `<p>_u16(b)`, `<p>_u32(b)`, `<p>_i8(b)`
 * and `<p>_f16(b)` (the f32 value of a little-endian f16 at byte `b`, exact), `<p>` the prefix,
 * and `<p>_bytes4(v)`, the four bytes of a word, lowest first.
 */
export function wgslGgmlReaders(options: WgslGgmlOptions): string {
  const p = options.prefix ?? 'ggml';
  const buf = options.buffer;
  return /* wgsl */ `
fn ${p}_u8(b: u32) -> u32 { return (${buf}[b >> 2u] >> ((b & 3u) * 8u)) & 0xffu; }
fn ${p}_i8(b: u32) -> i32 { return (bitcast<i32>(${p}_u8(b) << 24u)) >> 24u; }
fn ${p}_u16(b: u32) -> u32 { return ${p}_u8(b) | (${p}_u8(b + 1u) << 8u); }
fn ${p}_u32(b: u32) -> u32 {
  // Two word loads and a funnel shift; the second word is not used (nor needed) when aligned.
  let sh = (b & 3u) * 8u;
  let lo = ${buf}[b >> 2u];
  if (sh == 0u) { return lo; }
  return (lo >> sh) | (${buf}[(b >> 2u) + 1u] << (32u - sh));
}
fn ${p}_bytes4(v: u32) -> vec4<u32> {
  return vec4<u32>(v & 0xffu, (v >> 8u) & 0xffu, (v >> 16u) & 0xffu, v >> 24u);
}
fn ${p}_f16(b: u32) -> f32 {
  let h = ${p}_u16(b);
  let sign = (h & 0x8000u) << 16u;
  let e = (h >> 10u) & 0x1fu;
  let m = h & 0x3ffu;
  if (e == 0u) {
    // m · 2^-24: exact, and a normal f32 unless zero.
    return bitcast<f32>(sign | bitcast<u32>(f32(m) * bitcast<f32>(0x33800000u)));
  }
  if (e == 31u) { return bitcast<f32>(sign | 0x7f800000u | (m << 13u)); }
  return bitcast<f32>(sign | ((e + 112u) << 23u) | (m << 13u));
}`;
}

/** A 16-entry int8 table as four u32 words, indexed without a runtime-indexed array. */
function tableWords(values: readonly number[]): string {
  const words: string[] = [];
  for (let w = 0; w < 4; w++) {
    let v = 0;
    for (let k = 0; k < 4; k++) v |= (values[4 * w + k]! & 0xff) << (8 * k);
    words.push(`${v >>> 0}u`);
  }
  return words.join(', ');
}
const iq4NlWords = () => tableWords(IQ4_NL_VALUES);
const mxfp4Words = () => tableWords(MXFP4_VALUES);

/**
 * `v`: the int8 table entry that weight `i`'s 4-bit code selects, codes packed as Q4_0's from
 * byte `codes` of the block (IQ4_NL, MXFP4).
 */
const tableCode = (p: string, codes: number, words: string) => `
  let byte = ${p}_u8(block + ${codes}u + (i & 15u));
  let idx = select(byte & 15u, byte >> 4u, i >= 16u);
  let words = vec4<u32>(${words});
  let v = bitcast<i32>(words[idx >> 2u] << (24u - 8u * (idx & 3u))) >> 24u;`;

/** `q`: {@link tableCode}'s entries of weights `i .. i + 3`, one word read of codes. */
const tableCode4 = (p: string, codes: number, words: string) => `
  let v = ${p}_u32(block + ${codes}u + (i & 15u));
  let idx = ${p}_bytes4(select(v, v >> 4u, i >= 16u)) & vec4<u32>(15u);
  let words = vec4<u32>(${words});
  let t = vec4<u32>(words[idx.x >> 2u], words[idx.y >> 2u], words[idx.z >> 2u], words[idx.w >> 2u]);
  let q = bitcast<vec4<i32>>(t << (vec4<u32>(24u) - 8u * (idx & vec4<u32>(3u)))) >> vec4<u32>(24u);`;

/** MXFP4's scale `2^(e − 128)` from its E8M0 byte at `block` (ggml_e8m0_to_fp32_half). */
const mxfp4Scale = (p: string) =>
  `let e = ${p}_u8(block);
  let d = bitcast<f32>(select((e - 1u) << 23u, 0x00200000u << e, e < 2u));`;

const BODIES: Record<GgmlBlockType, (p: string) => string> = {
  Q4_0: (p) => `
  let byte = ${p}_u8(block + 2u + (i & 15u));
  let q = select(byte & 15u, byte >> 4u, i >= 16u);
  return f32(i32(q) - 8) * ${p}_f16(block);`,
  Q4_1: (p) => `
  let byte = ${p}_u8(block + 4u + (i & 15u));
  let q = select(byte & 15u, byte >> 4u, i >= 16u);
  return f32(q) * ${p}_f16(block) + ${p}_f16(block + 2u);`,
  Q5_0: (p) => `
  let byte = ${p}_u8(block + 6u + (i & 15u));
  let h = (${p}_u32(block + 2u) >> i) & 1u;
  let q = select(byte & 15u, byte >> 4u, i >= 16u) | (h << 4u);
  return f32(i32(q) - 16) * ${p}_f16(block);`,
  Q5_1: (p) => `
  let byte = ${p}_u8(block + 8u + (i & 15u));
  let h = (${p}_u32(block + 4u) >> i) & 1u;
  let q = select(byte & 15u, byte >> 4u, i >= 16u) | (h << 4u);
  return f32(q) * ${p}_f16(block) + ${p}_f16(block + 2u);`,
  Q8_0: (p) => `
  return f32(${p}_i8(block + 2u + i)) * ${p}_f16(block);`,
  // i = 128·half + 32·j + 16·k + l: scale byte 8·half + 2·j + k, code bits 2·j of qs[32·half + 16·k + l].
  Q2_K: (p) => `
  let half = i >> 7u;
  let j = (i >> 5u) & 3u;
  let k = (i >> 4u) & 1u;
  let l = i & 15u;
  let sc = ${p}_u8(block + 8u * half + 2u * j + k);
  let q = (${p}_u8(block + 16u + 32u * half + 16u * k + l) >> (2u * j)) & 3u;
  let dl = ${p}_f16(block + 80u) * f32(sc & 15u);
  let ml = ${p}_f16(block + 82u) * f32(sc >> 4u);
  return dl * f32(q) - ml;`,
  Q3_K: (p) => `
  let half = i >> 7u;
  let j = (i >> 5u) & 3u;
  let k = (i >> 4u) & 1u;
  let l = i & 15u;
  let s = 8u * half + 2u * j + k;
  let lo = (${p}_u8(block + 96u + (s & 7u)) >> (4u * (s >> 3u))) & 15u;
  let hi = (${p}_u8(block + 104u + (s & 3u)) >> (2u * (s >> 2u))) & 3u;
  let scale = i32(lo | (hi << 4u)) - 32;
  let low = (${p}_u8(block + 32u + 32u * half + 16u * k + l) >> (2u * j)) & 3u;
  let hbit = ${p}_u8(block + 16u * k + l) & (1u << (4u * half + j));
  let q = i32(low) - select(4, 0, hbit != 0u);
  let dl = ${p}_f16(block + 108u) * f32(scale);
  return dl * f32(q);`,
  // i = 64·j + 32·hi + l: sub-block 2·j + hi, qs[32·j + l]'s low (hi = 0) or high nibble.
  Q4_K: (p) => `
  let j = i >> 6u;
  let hi = (i >> 5u) & 1u;
  let l = i & 31u;
  let sm = ${p}_scale_min_k4(block + 4u, 2u * j + hi);
  let byte = ${p}_u8(block + 16u + 32u * j + l);
  let q = select(byte & 15u, byte >> 4u, hi == 1u);
  let dl = ${p}_f16(block) * f32(sm.x);
  return dl * f32(q) - ${p}_f16(block + 2u) * f32(sm.y);`,
  Q5_K: (p) => `
  let j = i >> 6u;
  let hi = (i >> 5u) & 1u;
  let l = i & 31u;
  let sm = ${p}_scale_min_k4(block + 4u, 2u * j + hi);
  let byte = ${p}_u8(block + 48u + 32u * j + l);
  let h = (${p}_u8(block + 16u + l) >> (2u * j + hi)) & 1u;
  let q = select(byte & 15u, byte >> 4u, hi == 1u) + 16u * h;
  let dl = ${p}_f16(block) * f32(sm.x);
  return dl * f32(q) - ${p}_f16(block + 2u) * f32(sm.y);`,
  // i = 128·half + 32·quarter + l: ql[64·half + l (+32 for odd quarters)], nibble quarter / 2,
  // qh[32·half + l] bits 2·quarter, scale 8·half + l / 16 + 2·quarter.
  Q6_K: (p) => `
  let half = i >> 7u;
  let quarter = (i >> 5u) & 3u;
  let l = i & 31u;
  let lb = ${p}_u8(block + 64u * half + l + 32u * (quarter & 1u));
  let lo = select(lb & 15u, lb >> 4u, quarter >= 2u);
  let hi = (${p}_u8(block + 128u + 32u * half + l) >> (2u * quarter)) & 3u;
  let q = i32(lo | (hi << 4u)) - 32;
  let sc = ${p}_i8(block + 192u + 8u * half + (l >> 4u) + 2u * quarter);
  let dl = ${p}_f16(block + 208u) * f32(sc);
  return dl * f32(q);`,
  IQ4_NL: (p) => `${tableCode(p, 2, iq4NlWords())}
  return f32(v) * ${p}_f16(block);`,
  MXFP4: (p) => `${tableCode(p, 1, mxfp4Words())}
  ${mxfp4Scale(p)}
  return f32(v) * d;`,
};

// Four consecutive weights i .. i + 3 (i a multiple of 4) share a scale and four consecutive
// bytes in every format: one unaligned word read gives their codes, one scale decode serves all.
const BODIES_X4: Record<GgmlBlockType, (p: string) => string> = {
  Q4_0: (p) => `
  let v = ${p}_u32(block + 2u + (i & 15u));
  let nib = ${p}_bytes4(select(v, v >> 4u, i >= 16u)) & vec4<u32>(15u);
  return vec4<f32>(vec4<i32>(nib) - vec4<i32>(8)) * ${p}_f16(block);`,
  Q4_1: (p) => `
  let v = ${p}_u32(block + 4u + (i & 15u));
  let nib = ${p}_bytes4(select(v, v >> 4u, i >= 16u)) & vec4<u32>(15u);
  return vec4<f32>(nib) * ${p}_f16(block) + ${p}_f16(block + 2u);`,
  Q5_0: (p) => `
  let v = ${p}_u32(block + 6u + (i & 15u));
  let nib = ${p}_bytes4(select(v, v >> 4u, i >= 16u)) & vec4<u32>(15u);
  let h = (vec4<u32>(${p}_u32(block + 2u) >> i) >> vec4<u32>(0u, 1u, 2u, 3u)) & vec4<u32>(1u);
  return vec4<f32>(vec4<i32>(nib | (h << vec4<u32>(4u))) - vec4<i32>(16)) * ${p}_f16(block);`,
  Q5_1: (p) => `
  let v = ${p}_u32(block + 8u + (i & 15u));
  let nib = ${p}_bytes4(select(v, v >> 4u, i >= 16u)) & vec4<u32>(15u);
  let h = (vec4<u32>(${p}_u32(block + 4u) >> i) >> vec4<u32>(0u, 1u, 2u, 3u)) & vec4<u32>(1u);
  return vec4<f32>(nib | (h << vec4<u32>(4u))) * ${p}_f16(block) + ${p}_f16(block + 2u);`,
  Q8_0: (p) => `
  let v = ${p}_u32(block + 2u + i);
  let q = bitcast<vec4<i32>>(vec4<u32>(v << 24u, v << 16u, v << 8u, v)) >> vec4<u32>(24u);
  return vec4<f32>(q) * ${p}_f16(block);`,
  Q2_K: (p) => `
  let half = i >> 7u;
  let j = (i >> 5u) & 3u;
  let k = (i >> 4u) & 1u;
  let l = i & 15u;
  let sc = ${p}_u8(block + 8u * half + 2u * j + k);
  let q = ${p}_bytes4(${p}_u32(block + 16u + 32u * half + 16u * k + l) >> (2u * j)) & vec4<u32>(3u);
  let dl = ${p}_f16(block + 80u) * f32(sc & 15u);
  let ml = ${p}_f16(block + 82u) * f32(sc >> 4u);
  return dl * vec4<f32>(q) - ml;`,
  Q3_K: (p) => `
  let half = i >> 7u;
  let j = (i >> 5u) & 3u;
  let k = (i >> 4u) & 1u;
  let l = i & 15u;
  let s = 8u * half + 2u * j + k;
  let lo = (${p}_u8(block + 96u + (s & 7u)) >> (4u * (s >> 3u))) & 15u;
  let hi = (${p}_u8(block + 104u + (s & 3u)) >> (2u * (s >> 2u))) & 3u;
  let scale = i32(lo | (hi << 4u)) - 32;
  let low = ${p}_bytes4(${p}_u32(block + 32u + 32u * half + 16u * k + l) >> (2u * j)) & vec4<u32>(3u);
  let hbit = ${p}_bytes4(${p}_u32(block + 16u * k + l) >> (4u * half + j)) & vec4<u32>(1u);
  let q = vec4<i32>(low) - 4 * vec4<i32>(vec4<u32>(1u) - hbit);
  let dl = ${p}_f16(block + 108u) * f32(scale);
  return dl * vec4<f32>(q);`,
  Q4_K: (p) => `
  let j = i >> 6u;
  let hi = (i >> 5u) & 1u;
  let l = i & 31u;
  let sm = ${p}_scale_min_k4(block + 4u, 2u * j + hi);
  let q = ${p}_bytes4(${p}_u32(block + 16u + 32u * j + l) >> (4u * hi)) & vec4<u32>(15u);
  let dl = ${p}_f16(block) * f32(sm.x);
  return dl * vec4<f32>(q) - ${p}_f16(block + 2u) * f32(sm.y);`,
  Q5_K: (p) => `
  let j = i >> 6u;
  let hi = (i >> 5u) & 1u;
  let l = i & 31u;
  let sm = ${p}_scale_min_k4(block + 4u, 2u * j + hi);
  let lo = ${p}_bytes4(${p}_u32(block + 48u + 32u * j + l) >> (4u * hi)) & vec4<u32>(15u);
  let h = ${p}_bytes4(${p}_u32(block + 16u + l) >> (2u * j + hi)) & vec4<u32>(1u);
  let dl = ${p}_f16(block) * f32(sm.x);
  return dl * vec4<f32>(lo + 16u * h) - ${p}_f16(block + 2u) * f32(sm.y);`,
  Q6_K: (p) => `
  let half = i >> 7u;
  let quarter = (i >> 5u) & 3u;
  let l = i & 31u;
  let lo = ${p}_bytes4(${p}_u32(block + 64u * half + l + 32u * (quarter & 1u)) >> (4u * (quarter >> 1u))) & vec4<u32>(15u);
  let hi = ${p}_bytes4(${p}_u32(block + 128u + 32u * half + l) >> (2u * quarter)) & vec4<u32>(3u);
  let q = vec4<i32>(lo | (hi << vec4<u32>(4u))) - vec4<i32>(32);
  let sc = ${p}_i8(block + 192u + 8u * half + (l >> 4u) + 2u * quarter);
  let dl = ${p}_f16(block + 208u) * f32(sc);
  return dl * vec4<f32>(q);`,
  IQ4_NL: (p) => `${tableCode4(p, 2, iq4NlWords())}
  return vec4<f32>(q) * ${p}_f16(block);`,
  MXFP4: (p) => `${tableCode4(p, 1, mxfp4Words())}
  ${mxfp4Scale(p)}
  return vec4<f32>(q) * d;`,
};

/** `get_scale_min_k4`: the 6-bit scale (x) and min (y) of sub-block `j` from 12 bytes at `s`. */
function scaleMinK4(p: string): string {
  return /* wgsl */ `
fn ${p}_scale_min_k4(s: u32, j: u32) -> vec2<u32> {
  if (j < 4u) { return vec2<u32>(${p}_u8(s + j) & 63u, ${p}_u8(s + j + 4u) & 63u); }
  let mixed = ${p}_u8(s + j + 4u);
  return vec2<u32>(
    (mixed & 15u) | ((${p}_u8(s + j - 4u) >> 6u) << 4u),
    (mixed >> 4u) | ((${p}_u8(s + j) >> 6u) << 4u),
  );
}`;
}

/**
 * WGSL source of `fn <prefix>_<type>(block: u32, i: u32) -> f32` for each of `types`: the value
 * of weight `i` (0 ≤ i < block size) of the block starting at byte `block` of `options.buffer`,
 * bit for bit the CPU dequantizer's; and `fn <prefix>_<type>_x4(block: u32, i: u32) ->
 * vec4<f32>`, weights `i .. i + 3` for `i` a multiple of 4 (one scale decode and one word read
 * of codes: what a matrix kernel's `loadW(row, k4)` needs). Includes the byte readers
 * ({@link wgslGgmlReaders}) once.
 *
 * @example
 * ```ts
 * const code = `@group(0) @binding(0) var<storage, read> w: array<u32>;
 * ${wgslGgmlDecoders(['Q4_K', 'Q6_K'], { buffer: 'w' })}
 * // ... ggml_q4_k(row_byte + (k / 256u) * 144u, k % 256u) ...`;
 * ```
 */
export function wgslGgmlDecoders(
  types: readonly GgmlBlockType[],
  options: WgslGgmlOptions,
): string {
  const p = options.prefix ?? 'ggml';
  const parts = [wgslGgmlReaders(options)];
  if (types.includes('Q4_K') || types.includes('Q5_K')) parts.push(scaleMinK4(p));
  for (const type of new Set(types)) {
    const f = GGML_BLOCK_FORMATS[type];
    parts.push(`
// ${type}: ${f.blockSize} weights in ${f.bytesPerBlock} bytes.
fn ${wgslGgmlDecodeName(type, p)}(block: u32, i: u32) -> f32 {${BODIES[type](p)}
}
fn ${wgslGgmlDecodeName(type, p)}_x4(block: u32, i: u32) -> vec4<f32> {${BODIES_X4[type](p)}
}`);
  }
  return parts.join('\n');
}

/**
 * WGSL `fn <prefix>_load4(row: u32, k4: u32) -> vec4<f32>`: elements `4·k4 .. 4·k4 + 3` of row
 * `row` of a `rows × cols` GGML matrix stored as in GGUF (row after row, `cols` a whole number
 * of blocks; byte `offset` of `options.buffer` is where row 0 starts). The shape of a matmul
 * kernel's weight load: a kernel written against `loadW(row, k4)` decodes GGUF weights on the
 * fly with it. Includes {@link wgslGgmlDecoders} for `type`.
 *
 * @throws {QuantizerError} `BAD_SHAPE` when `cols` is not a whole number of blocks.
 */
export function wgslGgmlLoad4(
  type: GgmlBlockType,
  cols: number,
  options: WgslGgmlOptions & { readonly offset?: number },
): string {
  const f = GGML_BLOCK_FORMATS[type];
  checkBlocks(f, cols);
  const p = options.prefix ?? 'ggml';
  const rowBytes = (cols / f.blockSize) * f.bytesPerBlock;
  return `${wgslGgmlDecoders([type], options)}
fn ${p}_load4(row: u32, k4: u32) -> vec4<f32> {
  let k = 4u * k4;
  let block = ${options.offset ?? 0}u + row * ${rowBytes}u + (k / ${f.blockSize}u) * ${f.bytesPerBlock}u;
  return ${wgslGgmlDecodeName(type, p)}_x4(block, k % ${f.blockSize}u);
}`;
}
