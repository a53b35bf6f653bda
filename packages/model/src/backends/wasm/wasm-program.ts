import type { KvFormatName } from '../../execution/kv-cache.js';
import type { StoredFormat } from '../../kernels/weight-format.js';

// The op records the kernels' thread runtime walks (c/kernels.c and c/attention.c are the
// other half: the opcodes, the record size and each record's argument order must match it).

/** i32 words per op record. */
export const OP_WORDS = 32;
/** Bit of word 0: every thread waits for the others after this op. */
const OP_BARRIER = 0x80000000;

export const Op = {
  matmul: 1,
  rmsNorm: 2,
  embed: 3,
  ropeKv: 4,
  attention: 5,
  stream: 6,
  keyShift: 7,
  quantize: 8,
} as const;

/**
 * Bytes of one row of k activations quantized for the GGML matmuls (`Op.quantize`; c/int8-dot.h's
 * XQ_ROW_BYTES, the same in both builds).
 */
export function quantizedRowBytes(k: number): number {
  return 2 * k + k / 8 + k / 4;
}

/**
 * Weight storage codes (`StoredFormat` as the kernels number it: the dense formats, then the
 * GGML block formats of c/ggml-matmul.h).
 */
export const WeightCode = {
  f32: 0,
  f16: 1,
  int8: 2,
  Q4_0: 3,
  Q4_1: 4,
  Q5_0: 5,
  Q5_1: 6,
  Q8_0: 7,
  Q2_K: 8,
  Q3_K: 9,
  Q4_K: 10,
  Q5_K: 11,
  Q6_K: 12,
  IQ4_NL: 13,
  MXFP4: 14,
} as const satisfies Record<StoredFormat, number>;
/** Matmul epilogues. */
export const EpilogueCode = {
  store: 0,
  residual: 1,
  swiglu: 2,
  geglu: 3,
  'swiglu-oai': 4,
} as const;
/** KV cache formats the kernels read and write, by `KvFormatName` (c/kv-formats.h). */
export const KvCode = {
  f32: 0,
  f16: 1,
  int8: 2,
  'fp8-e4m3': 3,
  'fp8-e5m2': 4,
  'int8-h8': 5,
  'int4-g32': 6,
  'int4-g32-h32': 7,
} as const satisfies Record<KvFormatName, number>;

/**
 * Largest head dim of the rotated KV formats' row encoder and of the key-shift op
 * (`KV_MAX_HEAD_DIM` in C).
 */
export const KV_MAX_HEAD_DIM = 512;

const f32Bits = new Float32Array(1);
const f32BitsU = new Int32Array(f32Bits.buffer);

/** The i32 bit pattern of an f32 (how float arguments travel in a record). */
export function f32Word(x: number): number {
  f32Bits[0] = x;
  return f32BitsU[0] as number;
}

/**
 * Builds a program in place in wasm memory: `push` appends one op, `barrier()` marks the last
 * op as one the next must wait for (any op reading what an earlier one wrote).
 */
export class ProgramBuilder {
  #words: Int32Array;
  #count = 0;
  /** What each op is, for per-op profiles (wasm-executor's `profile`). */
  readonly labels: string[] = [];

  constructor(
    readonly ptr: number,
    view: Int32Array,
    readonly capacity: number,
  ) {
    this.#words = view;
  }

  get count(): number {
    return this.#count;
  }

  /** Points the builder at a new view of its words (the memory grew: the old one detached). */
  rebind(view: Int32Array): void {
    this.#words = view;
  }

  push(op: number, args: readonly number[], label = ''): this {
    if (this.#count >= this.capacity) throw new RangeError('program capacity exceeded');
    if (args.length >= OP_WORDS) throw new RangeError('too many op arguments');
    const o = this.#count * OP_WORDS;
    this.#words.fill(0, o, o + OP_WORDS);
    this.#words[o] = op;
    for (let i = 0; i < args.length; i++) this.#words[o + 1 + i] = args[i] as number;
    this.labels[this.#count] = label;
    this.#count++;
    return this;
  }

  barrier(): this {
    if (this.#count > 0) {
      const o = (this.#count - 1) * OP_WORDS;
      this.#words[o] = (this.#words[o] as number) | OP_BARRIER | 0;
    }
    return this;
  }

  reset(): this {
    this.#count = 0;
    return this;
  }
}
