import { type FileHandle, open } from 'node:fs/promises';
import { basename } from 'node:path';
import { type ModelConfig, type RopeScaling, validateModelConfig } from '../../config.js';
import { fileIoError, ModelError } from '../../errors.js';
import {
  type CheckpointReader,
  FileCheckpointReader,
  type OpenCheckpointOptions,
  type TensorInfo,
  type TensorLocation,
  validateCheckpointTensors,
} from '../checkpoint-reader.js';
import { decodeToF32, dtypeByteLength, type TensorDtype } from '../dtype.js';
import {
  storedByteLength,
  type TensorToWrite,
  tensorBytes,
  writeFileWith,
} from '../tensor-write.js';

/** GGUF metadata value types (the `gguf_type` enum). */
export type GgufValueType =
  | 'u8'
  | 'i8'
  | 'u16'
  | 'i16'
  | 'u32'
  | 'i32'
  | 'f32'
  | 'bool'
  | 'string'
  | 'array'
  | 'u64'
  | 'i64'
  | 'f64';

const VALUE_TYPES: readonly GgufValueType[] = [
  'u8',
  'i8',
  'u16',
  'i16',
  'u32',
  'i32',
  'f32',
  'bool',
  'string',
  'array',
  'u64',
  'i64',
  'f64',
];

/** A metadata value with an explicit GGUF type, for the writer. */
export type GgufTypedValue =
  | {
      readonly type: Exclude<GgufValueType, 'array' | 'string' | 'bool'>;
      readonly value: number | bigint;
    }
  | { readonly type: 'string'; readonly value: string }
  | { readonly type: 'bool'; readonly value: boolean }
  | {
      readonly type: 'array';
      readonly itemType: Exclude<GgufValueType, 'array'>;
      readonly value: readonly (number | bigint | string | boolean)[];
    };

/** ggml tensor type ids this package reads and writes. */
const GGML_TYPE_ID: Record<TensorDtype, number> = { F32: 0, F16: 1, Q8_0: 8, BF16: 30 };
const GGML_TYPE_BY_ID = new Map<number, TensorDtype>([
  [0, 'F32'],
  [1, 'F16'],
  [8, 'Q8_0'],
  [30, 'BF16'],
]);
/** Names of ggml types we refuse, for clear messages. */
const GGML_TYPE_NAMES: Record<number, string> = {
  2: 'Q4_0',
  3: 'Q4_1',
  6: 'Q5_0',
  7: 'Q5_1',
  9: 'Q8_1',
  10: 'Q2_K',
  11: 'Q3_K',
  12: 'Q4_K',
  13: 'Q5_K',
  14: 'Q6_K',
  15: 'Q8_K',
  16: 'IQ2_XXS',
  17: 'IQ2_XS',
  18: 'IQ3_XXS',
  19: 'IQ1_S',
  20: 'IQ4_NL',
  21: 'IQ3_S',
  22: 'IQ2_S',
  23: 'IQ4_XS',
  24: 'I8',
  25: 'I16',
  26: 'I32',
  27: 'I64',
  28: 'F64',
  29: 'IQ1_M',
};

/** A tensor entry of a GGUF file, under its GGUF name and in GGUF dimension order. */
export interface GgufTensorEntry {
  /** GGUF name, e.g. `blk.0.attn_q.weight`. */
  readonly name: string;
  /** Element type. */
  readonly dtype: TensorDtype;
  /** ggml dimensions (`ne`), innermost first: the reverse of the HF shape. */
  readonly dims: readonly number[];
  /** Absolute file offset of the first byte. */
  readonly offset: number;
  /** Byte length. */
  readonly byteLength: number;
}

/** A parsed GGUF header. */
export interface GgufHeader {
  /** Format version (2 or 3). */
  readonly version: number;
  /** Every metadata key/value, in file order; u64/i64 values above 2^53 stay `bigint`. */
  readonly metadata: Map<string, unknown>;
  /** Tensors in file order. */
  readonly tensors: readonly GgufTensorEntry[];
  /** Alignment of tensor data (default 32). */
  readonly alignment: number;
  /** Absolute offset of the tensor data section. */
  readonly dataStart: number;
}

const MAX_STRING = 64 * 1024 * 1024;
const SCALAR_SIZES: Partial<Record<GgufValueType, number>> = {
  u8: 1,
  i8: 1,
  bool: 1,
  u16: 2,
  i16: 2,
  u32: 4,
  i32: 4,
  f32: 4,
  u64: 8,
  i64: 8,
  f64: 8,
};
const MAX_ARRAY = 1 << 28;

/** Buffered sequential reader over positional reads, so a header never needs the whole file. */
class Cursor {
  private buf = new Uint8Array(0);
  private view = new DataView(this.buf.buffer);
  private bufStart = 0;
  pos = 0;
  constructor(
    private readonly fh: FileHandle,
    private readonly size: number,
    private readonly file: string,
  ) {}

  // Buffer#toString decodes short UTF-8 strings several times faster than TextDecoder.
  private nodeBuf = Buffer.alloc(0);

  /** Whether the next `n` bytes are already in the window (no await needed). */
  buffered(n: number): boolean {
    return this.pos >= this.bufStart && this.pos + n <= this.bufStart + this.buf.byteLength;
  }

  async ensure(n: number, what: string): Promise<void> {
    if (this.pos + n > this.size) {
      throw new ModelError(
        'TRUNCATED_FILE',
        `${basename(this.file)}: ${what} at byte ${this.pos} runs past the end of the ${this.size}-byte file`,
        { details: { file: this.file } },
      );
    }
    if (this.buffered(n)) return;
    const len = Math.min(this.size - this.pos, Math.max(n, 1 << 20));
    const b = new Uint8Array(len);
    let done = 0;
    while (done < len) {
      const { bytesRead } = await this.fh.read(b, done, len - done, this.pos + done);
      if (bytesRead === 0) break;
      done += bytesRead;
    }
    this.buf = b;
    this.nodeBuf = Buffer.from(b.buffer, b.byteOffset, b.byteLength);
    this.view = new DataView(b.buffer);
    this.bufStart = this.pos;
  }

  private at(): number {
    return this.pos - this.bufStart;
  }

  async u32(what: string): Promise<number> {
    await this.ensure(4, what);
    const v = this.view.getUint32(this.at(), true);
    this.pos += 4;
    return v;
  }

  async u64(what: string): Promise<bigint> {
    await this.ensure(8, what);
    const v = this.view.getBigUint64(this.at(), true);
    this.pos += 8;
    return v;
  }

  async safeU64(what: string, limit: number): Promise<number> {
    const v = await this.u64(what);
    if (v > BigInt(limit)) {
      throw new ModelError(
        'MALFORMED_FILE',
        `${basename(this.file)}: ${what} ${v} exceeds the limit ${limit}`,
        {
          details: { file: this.file },
        },
      );
    }
    return Number(v);
  }

  async string(what: string): Promise<string> {
    const n = await this.safeU64(`${what} length`, MAX_STRING);
    await this.ensure(n, what);
    const s = this.nodeBuf.toString('utf8', this.at(), this.at() + n);
    this.pos += n;
    return s;
  }

  async scalar(type: Exclude<GgufValueType, 'array'>, what: string): Promise<unknown> {
    if (type === 'string') return this.string(what);
    await this.ensure(SCALAR_SIZES[type]!, what);
    return this.scalarSync(type);
  }

  /** Reads a non-string scalar that {@link ensure} already brought into the window. */
  scalarSync(type: Exclude<GgufValueType, 'array' | 'string'>): unknown {
    const o = this.at();
    const d = this.view;
    this.pos += SCALAR_SIZES[type]!;
    switch (type) {
      case 'u8':
        return d.getUint8(o);
      case 'i8':
        return d.getInt8(o);
      case 'bool':
        return d.getUint8(o) !== 0;
      case 'u16':
        return d.getUint16(o, true);
      case 'i16':
        return d.getInt16(o, true);
      case 'u32':
        return d.getUint32(o, true);
      case 'i32':
        return d.getInt32(o, true);
      case 'f32':
        return d.getFloat32(o, true);
      case 'f64':
        return d.getFloat64(o, true);
      case 'u64': {
        const v = d.getBigUint64(o, true);
        return v <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : v;
      }
      default: {
        const v = d.getBigInt64(o, true);
        return v <= BigInt(Number.MAX_SAFE_INTEGER) && v >= BigInt(Number.MIN_SAFE_INTEGER)
          ? Number(v)
          : v;
      }
    }
  }

  /**
   * Reads `n` items, parsing synchronously while they are in the window: vocabularies have
   * hundreds of thousands of strings, and an await per item would dominate opening a file.
   */
  async array(
    itemType: Exclude<GgufValueType, 'array'>,
    n: number,
    what: string,
  ): Promise<unknown[]> {
    const arr = new Array<unknown>(n);
    if (itemType === 'string') {
      for (let j = 0; j < n; j++) {
        if (!this.buffered(8)) await this.ensure(8, `${what}[${j}] length`);
        const lo = this.view.getUint32(this.at(), true);
        const hi = this.view.getUint32(this.at() + 4, true);
        if (hi !== 0 || lo > MAX_STRING) {
          throw new ModelError(
            'MALFORMED_FILE',
            `${basename(this.file)}: ${what}[${j}] length ${hi * 2 ** 32 + lo} exceeds the limit ${MAX_STRING}`,
            { details: { file: this.file } },
          );
        }
        this.pos += 8;
        const l = lo;
        if (!this.buffered(l)) await this.ensure(l, `${what}[${j}]`);
        const o = this.at();
        arr[j] = this.nodeBuf.toString('utf8', o, o + l);
        this.pos += l;
      }
      return arr;
    }
    const size = SCALAR_SIZES[itemType]!;
    for (let j = 0; j < n; j++) {
      if (!this.buffered(size)) await this.ensure(size, `${what}[${j}]`);
      arr[j] = this.scalarSync(itemType);
    }
    return arr;
  }

  async valueType(what: string): Promise<GgufValueType> {
    const t = await this.u32(what);
    const name = VALUE_TYPES[t];
    if (!name) {
      throw new ModelError(
        'MALFORMED_FILE',
        `${basename(this.file)}: ${what} has unknown value type ${t}`,
        {
          details: { file: this.file },
        },
      );
    }
    return name;
  }
}

/**
 * Reads and validates a GGUF header (metadata and tensor infos) through buffered positional
 * reads; tensor data is never read.
 *
 * @throws {@link ModelError} `MALFORMED_FILE` (bad magic, version, counts, alignment, overlap),
 *   `TRUNCATED_FILE` (header or a tensor past EOF, naming the tensor), `UNSUPPORTED_DTYPE`
 *   (naming the tensor and its ggml type).
 */
export async function readGgufHeader(fh: FileHandle, file: string): Promise<GgufHeader> {
  const size = (await fh.stat()).size;
  const c = new Cursor(fh, size, file);
  const magic = await c.u32('magic');
  if (magic !== 0x46554747) {
    throw new ModelError(
      'MALFORMED_FILE',
      `${basename(file)}: not a GGUF file (bad magic 0x${magic.toString(16)})`,
      {
        details: { file },
      },
    );
  }
  const version = await c.u32('version');
  if (version !== 2 && version !== 3) {
    throw new ModelError(
      'MALFORMED_FILE',
      `${basename(file)}: unsupported GGUF version ${version} (supported: 2, 3)`,
      {
        details: { file },
      },
    );
  }
  const tensorCount = await c.safeU64('tensor count', 1 << 24);
  const kvCount = await c.safeU64('metadata count', 1 << 24);
  const metadata = new Map<string, unknown>();
  for (let i = 0; i < kvCount; i++) {
    const key = await c.string('metadata key');
    const type = await c.valueType(`metadata "${key}"`);
    if (type === 'array') {
      const itemType = await c.valueType(`metadata "${key}" items`);
      if (itemType === 'array') {
        throw new ModelError(
          'MALFORMED_FILE',
          `${basename(file)}: nested arrays in "${key}" are not supported`,
          {
            details: { file },
          },
        );
      }
      const n = await c.safeU64(`metadata "${key}" array length`, MAX_ARRAY);
      metadata.set(key, await c.array(itemType, n, `metadata "${key}"`));
    } else {
      metadata.set(key, await c.scalar(type, `metadata "${key}"`));
    }
  }
  const alignRaw = metadata.get('general.alignment') ?? 32;
  if (
    typeof alignRaw !== 'number' ||
    !Number.isInteger(alignRaw) ||
    alignRaw <= 0 ||
    alignRaw % 8 !== 0
  ) {
    throw new ModelError(
      'MALFORMED_FILE',
      `${basename(file)}: bad general.alignment ${String(alignRaw)}`,
      {
        details: { file },
      },
    );
  }
  const alignment = alignRaw;
  const raw: { name: string; dtype: TensorDtype; dims: number[]; rel: number }[] = [];
  for (let i = 0; i < tensorCount; i++) {
    const name = await c.string('tensor name');
    const nd = await c.u32(`tensor "${name}" dimension count`);
    if (nd < 1 || nd > 4) {
      throw new ModelError(
        'MALFORMED_FILE',
        `${basename(file)}: tensor "${name}" has ${nd} dimensions`,
        {
          details: { file, tensor: name },
        },
      );
    }
    const dims: number[] = [];
    for (let d = 0; d < nd; d++) dims.push(await c.safeU64(`tensor "${name}" dimension`, 2 ** 40));
    const typeId = await c.u32(`tensor "${name}" type`);
    const dtype = GGML_TYPE_BY_ID.get(typeId);
    if (!dtype) {
      const tname = GGML_TYPE_NAMES[typeId] ?? `type id ${typeId}`;
      throw new ModelError(
        'UNSUPPORTED_DTYPE',
        `${basename(file)}: tensor "${name}" is ${tname}; supported: F32, F16, BF16, Q8_0`,
        { details: { file, tensor: name, ggmlType: typeId } },
      );
    }
    if (dtype === 'Q8_0' && dims[0]! % 32 !== 0) {
      throw new ModelError(
        'MALFORMED_FILE',
        `${basename(file)}: Q8_0 tensor "${name}" rows of ${dims[0]} are not whole blocks`,
        {
          details: { file, tensor: name },
        },
      );
    }
    const rel = await c.safeU64(`tensor "${name}" offset`, Number.MAX_SAFE_INTEGER);
    if (rel % alignment !== 0) {
      throw new ModelError(
        'MALFORMED_FILE',
        `${basename(file)}: tensor "${name}" offset ${rel} is not aligned to ${alignment}`,
        {
          details: { file, tensor: name },
        },
      );
    }
    raw.push({ name, dtype, dims, rel });
  }
  const dataStart = Math.ceil(c.pos / alignment) * alignment;
  const tensors: GgufTensorEntry[] = [];
  for (const r of raw) {
    const n = r.dims.reduce((a, b) => a * b, 1);
    const byteLength = dtypeByteLength(r.dtype, n);
    const offset = dataStart + r.rel;
    if (offset + byteLength > size) {
      throw new ModelError(
        'TRUNCATED_FILE',
        `${basename(file)}: tensor "${r.name}" [${offset}, ${offset + byteLength}) runs past the end of the ${size}-byte file`,
        { details: { file, tensor: r.name } },
      );
    }
    tensors.push({ name: r.name, dtype: r.dtype, dims: r.dims, offset, byteLength });
  }
  const sorted = [...tensors].sort((a, b) => a.offset - b.offset);
  for (let i = 1; i < sorted.length; i++) {
    const p = sorted[i - 1]!;
    const q = sorted[i]!;
    if (q.offset < p.offset + p.byteLength) {
      throw new ModelError(
        'MALFORMED_FILE',
        `${basename(file)}: tensors "${p.name}" and "${q.name}" overlap`,
        {
          details: { file, tensor: q.name },
        },
      );
    }
  }
  return { version, metadata, tensors, alignment, dataStart };
}

const LAYER_MAP: Record<string, string> = {
  attn_norm: 'input_layernorm',
  attn_q: 'self_attn.q_proj',
  attn_k: 'self_attn.k_proj',
  attn_v: 'self_attn.v_proj',
  attn_output: 'self_attn.o_proj',
  ffn_norm: 'post_attention_layernorm',
  ffn_gate: 'mlp.gate_proj',
  ffn_up: 'mlp.up_proj',
  ffn_down: 'mlp.down_proj',
};
const GLOBAL_MAP: Record<string, string> = {
  token_embd: 'model.embed_tokens',
  output_norm: 'model.norm',
  output: 'lm_head',
};
const HF_LAYER_MAP = Object.fromEntries(Object.entries(LAYER_MAP).map(([k, v]) => [v, k]));
const HF_GLOBAL_MAP = Object.fromEntries(Object.entries(GLOBAL_MAP).map(([k, v]) => [v, k]));

/** Canonical HF name of a GGUF tensor name, or `undefined` for tensors with no HF twin. */
export function ggufToHfName(name: string): string | undefined {
  const m = /^blk\.(\d+)\.([a-z_]+)\.(weight|bias)$/.exec(name);
  if (m) {
    const hf = LAYER_MAP[m[2]!];
    return hf ? `model.layers.${m[1]}.${hf}.${m[3]}` : undefined;
  }
  const g = /^([a-z_]+)\.(weight|bias)$/.exec(name);
  if (g) {
    const hf = GLOBAL_MAP[g[1]!];
    return hf ? `${hf}.${g[2]}` : undefined;
  }
  return undefined;
}

/** GGUF name of a canonical HF tensor name (the inverse of {@link ggufToHfName}). */
export function hfToGgufName(name: string): string | undefined {
  const m = /^model\.layers\.(\d+)\.(.+)\.(weight|bias)$/.exec(name);
  if (m) {
    const g = HF_LAYER_MAP[m[2]!];
    return g ? `blk.${m[1]}.${g}.${m[3]}` : undefined;
  }
  const g = /^(.+)\.(weight|bias)$/.exec(name);
  if (g) {
    const gg = HF_GLOBAL_MAP[g[1]!];
    return gg ? `${gg}.${g[2]}` : undefined;
  }
  return undefined;
}

function metaNum(md: Map<string, unknown>, key: string, file: string, fallback?: number): number {
  const v = md.get(key);
  if (v === undefined) {
    if (fallback !== undefined) return fallback;
    throw new ModelError('INVALID_CONFIG', `${basename(file)}: GGUF metadata "${key}" is missing`, {
      details: { file, key },
    });
  }
  if (typeof v !== 'number' || !Number.isFinite(v)) {
    throw new ModelError(
      'INVALID_CONFIG',
      `${basename(file)}: GGUF metadata "${key}" is not a number`,
      {
        details: { file, key },
      },
    );
  }
  return v;
}

/** GGUF architectures read here: llama (Llama, Mistral, SmolLM, TinyLlama) and qwen2. */
const GGUF_ARCHS = ['llama', 'qwen2'] as const;

/**
 * Builds a {@link ModelConfig} from GGUF metadata (the `<arch>.*` keys and tokenizer ids) and
 * the tensor list (tied embeddings when `output.weight` is absent; vocabulary size from
 * `token_embd`; RoPE factors from `rope_freqs`, passed in when present).
 *
 * @throws {@link ModelError} `UNSUPPORTED_ARCHITECTURE` for other architectures or partial
 *   RoPE; `INVALID_CONFIG` for missing keys.
 */
export function configFromGguf(
  md: Map<string, unknown>,
  tensors: readonly GgufTensorEntry[],
  file: string,
  ropeFreqFactors?: Float32Array,
): ModelConfig {
  const arch = md.get('general.architecture');
  if (typeof arch !== 'string' || !(GGUF_ARCHS as readonly string[]).includes(arch)) {
    throw new ModelError(
      'UNSUPPORTED_ARCHITECTURE',
      `${basename(file)}: GGUF architecture ${JSON.stringify(arch)} is not supported (supported: ${GGUF_ARCHS.join(', ')})`,
      { details: { file, architecture: arch } },
    );
  }
  const hiddenSize = metaNum(md, `${arch}.embedding_length`, file);
  const numHeads = metaNum(md, `${arch}.attention.head_count`, file);
  const numKvHeads = metaNum(md, `${arch}.attention.head_count_kv`, file, numHeads);
  const headDim = metaNum(
    md,
    `${arch}.attention.key_length`,
    file,
    Math.floor(hiddenSize / numHeads),
  );
  const ropeDim = metaNum(md, `${arch}.rope.dimension_count`, file, headDim);
  if (ropeDim !== headDim) {
    throw new ModelError(
      'UNSUPPORTED_ARCHITECTURE',
      `${basename(file)}: partial RoPE (${ropeDim} of ${headDim} dims) is not supported`,
      {
        details: { file },
      },
    );
  }
  const byName = new Map(tensors.map((t) => [t.name, t]));
  const embd = byName.get('token_embd.weight');
  if (!embd) {
    throw new ModelError(
      'MISSING_TENSOR',
      `${basename(file)}: missing tensor "token_embd.weight"`,
      {
        details: { file, tensor: 'token_embd.weight' },
      },
    );
  }
  let ropeScaling: RopeScaling | null = null;
  const st = md.get(`${arch}.rope.scaling.type`);
  if (st === 'linear') {
    ropeScaling = { type: 'linear', factor: metaNum(md, `${arch}.rope.scaling.factor`, file) };
  } else if (st !== undefined && st !== 'none') {
    throw new ModelError(
      'UNSUPPORTED_ARCHITECTURE',
      `${basename(file)}: RoPE scaling ${JSON.stringify(st)} is not supported`,
      {
        details: { file },
      },
    );
  }
  if (ropeFreqFactors) ropeScaling = { type: 'freq-factors', factors: Array.from(ropeFreqFactors) };
  const eos: number[] = [];
  for (const k of [
    'tokenizer.ggml.eos_token_id',
    'tokenizer.ggml.eot_token_id',
    'tokenizer.ggml.eom_token_id',
  ]) {
    const v = md.get(k);
    if (typeof v === 'number' && !eos.includes(v)) eos.push(v);
  }
  const bos = md.get('tokenizer.ggml.bos_token_id');
  const config: ModelConfig = {
    architecture: arch === 'qwen2' ? 'qwen2' : 'llama',
    hiddenSize,
    intermediateSize: metaNum(md, `${arch}.feed_forward_length`, file),
    numLayers: metaNum(md, `${arch}.block_count`, file),
    numHeads,
    numKvHeads,
    headDim,
    vocabSize: embd.dims[1] ?? 0,
    rmsNormEps: metaNum(md, `${arch}.attention.layer_norm_rms_epsilon`, file),
    ropeTheta: metaNum(md, `${arch}.rope.freq_base`, file, 10000),
    ropeScaling,
    maxPositionEmbeddings: metaNum(md, `${arch}.context_length`, file),
    tieWordEmbeddings: !byName.has('output.weight'),
    attentionBias: arch === 'qwen2' || byName.has('blk.0.attn_q.bias'),
    attentionOutputBias: byName.has('blk.0.attn_output.bias'),
    slidingWindow: null,
    bosTokenId: typeof bos === 'number' ? bos : null,
    eosTokenIds: eos,
  };
  try {
    validateModelConfig(config);
  } catch (e) {
    throw new ModelError('INVALID_CONFIG', `${basename(file)}: ${(e as Error).message}`, {
      cause: e,
      details: { file },
    });
  }
  return config;
}

/**
 * Opens a GGUF checkpoint (GGUF v2/v3, architecture llama or qwen2; F32/F16/BF16/Q8_0
 * tensors). Tensors are exposed under canonical HF names and shapes; llama's Q/K rows, which
 * llama.cpp's converter permutes for its interleaved RoPE, are un-permuted on read so the bytes
 * equal the HF tensors. Q8_0 stays Q8_0 (see {@link dequantizeQ8_0}).
 *
 * @throws {@link ModelError} `IO`, `MALFORMED_FILE`, `TRUNCATED_FILE`, `UNSUPPORTED_DTYPE`,
 *   `UNSUPPORTED_ARCHITECTURE`, `INVALID_CONFIG`, `MISSING_TENSOR`, `SHAPE_MISMATCH`.
 */
export async function openGgufCheckpoint(
  path: string,
  options?: OpenCheckpointOptions,
): Promise<CheckpointReader> {
  let fh: FileHandle;
  try {
    fh = await open(path, 'r');
  } catch (e) {
    throw fileIoError('cannot open', path, e);
  }
  try {
    const header = await readGgufHeader(fh, path);
    const ropeEntry = header.tensors.find((t) => t.name === 'rope_freqs.weight');
    let ropeFactors: Float32Array | undefined;
    if (ropeEntry) {
      const b = new Uint8Array(ropeEntry.byteLength);
      await fh.read(b, 0, b.byteLength, ropeEntry.offset);
      ropeFactors = decodeToF32(ropeEntry.dtype, b);
    }
    let config = configFromGguf(header.metadata, header.tensors, path, ropeFactors);
    if (options?.configOverride) config = options.configOverride(config);
    const permute = header.metadata.get('general.architecture') === 'llama';
    const tensors = new Map<string, TensorInfo>();
    const locations = new Map<string, TensorLocation>();
    for (const t of header.tensors) {
      const name = ggufToHfName(t.name) ?? t.name;
      const shape = [...t.dims].reverse();
      tensors.set(name, { name, dtype: t.dtype, shape, byteLength: t.byteLength });
      const isQ = /\.self_attn\.q_proj\./.test(name);
      const isK = /\.self_attn\.k_proj\./.test(name);
      locations.set(name, {
        file: path,
        offset: t.offset,
        ...(permute && (isQ || isK) ? { unpermuteHeadRows: config.headDim } : {}),
      });
    }
    validateCheckpointTensors(config, tensors, path);
    return new FileCheckpointReader({
      format: 'gguf',
      path,
      config,
      tensors,
      locations,
      metadata: header.metadata,
      handles: new Map([[path, fh]]),
    });
  } catch (e) {
    await fh.close().catch(() => undefined);
    throw e;
  }
}

/**
 * A tensor for {@link writeGguf}: `name` is its GGUF name and `shape` is in HF (row-major)
 * order, written reversed as ggml `ne`.
 */
export type GgufTensorToWrite = TensorToWrite;

function inferValue(v: unknown, key: string): GgufTypedValue {
  if (typeof v === 'object' && v !== null && 'type' in v && 'value' in v)
    return v as GgufTypedValue;
  if (typeof v === 'string') return { type: 'string', value: v };
  if (typeof v === 'boolean') return { type: 'bool', value: v };
  if (typeof v === 'bigint') return { type: 'u64', value: v };
  if (typeof v === 'number') {
    if (Number.isInteger(v) && v >= 0 && v < 2 ** 32) return { type: 'u32', value: v };
    if (Number.isInteger(v) && v < 0 && v >= -(2 ** 31)) return { type: 'i32', value: v };
    return { type: 'f32', value: v };
  }
  if (Array.isArray(v)) {
    if (v.every((x) => typeof x === 'string'))
      return { type: 'array', itemType: 'string', value: v };
    if (v.every((x) => typeof x === 'number' && Number.isInteger(x))) {
      return { type: 'array', itemType: 'i32', value: v };
    }
    if (v.every((x) => typeof x === 'number')) return { type: 'array', itemType: 'f32', value: v };
  }
  throw new ModelError(
    'INVALID_ARGUMENT',
    `GGUF metadata "${key}": cannot infer a GGUF type for ${typeof v}`,
  );
}

class ByteSink {
  private parts: Uint8Array[] = [];
  private cur = new Uint8Array(1 << 16);
  private view = new DataView(this.cur.buffer);
  private at = 0;
  length = 0;
  private room(n: number): void {
    if (this.at + n <= this.cur.byteLength) return;
    this.parts.push(this.cur.subarray(0, this.at));
    this.cur = new Uint8Array(Math.max(1 << 16, n));
    this.view = new DataView(this.cur.buffer);
    this.at = 0;
  }
  u8(v: number) {
    this.room(1);
    this.view.setUint8(this.at, v);
    this.at += 1;
    this.length += 1;
  }
  u32(v: number) {
    this.room(4);
    this.view.setUint32(this.at, v, true);
    this.at += 4;
    this.length += 4;
  }
  u64(v: number | bigint) {
    this.room(8);
    this.view.setBigUint64(this.at, BigInt(v), true);
    this.at += 8;
    this.length += 8;
  }
  bytes(b: Uint8Array) {
    this.room(b.byteLength);
    this.cur.set(b, this.at);
    this.at += b.byteLength;
    this.length += b.byteLength;
  }
  string(s: string) {
    const b = new TextEncoder().encode(s);
    this.u64(b.byteLength);
    this.bytes(b);
  }
  scalar(type: Exclude<GgufValueType, 'array'>, v: number | bigint | string | boolean) {
    switch (type) {
      case 'string':
        this.string(String(v));
        return;
      case 'bool':
        this.u8(v ? 1 : 0);
        return;
      case 'u8':
      case 'i8': {
        this.room(1);
        if (type === 'u8') this.view.setUint8(this.at, Number(v));
        else this.view.setInt8(this.at, Number(v));
        this.at += 1;
        this.length += 1;
        return;
      }
      case 'u16':
      case 'i16': {
        this.room(2);
        if (type === 'u16') this.view.setUint16(this.at, Number(v), true);
        else this.view.setInt16(this.at, Number(v), true);
        this.at += 2;
        this.length += 2;
        return;
      }
      case 'u32':
      case 'i32':
      case 'f32': {
        this.room(4);
        if (type === 'u32') this.view.setUint32(this.at, Number(v), true);
        else if (type === 'i32') this.view.setInt32(this.at, Number(v), true);
        else this.view.setFloat32(this.at, Number(v), true);
        this.at += 4;
        this.length += 4;
        return;
      }
      default: {
        this.room(8);
        if (type === 'u64') this.view.setBigUint64(this.at, BigInt(v as number | bigint), true);
        else if (type === 'i64') this.view.setBigInt64(this.at, BigInt(v as number | bigint), true);
        else this.view.setFloat64(this.at, Number(v), true);
        this.at += 8;
        this.length += 8;
      }
    }
  }
  finish(): Uint8Array {
    this.parts.push(this.cur.subarray(0, this.at));
    const out = new Uint8Array(this.length);
    let o = 0;
    for (const p of this.parts) {
      out.set(p, o);
      o += p.byteLength;
    }
    return out;
  }
}

/**
 * Writes a GGUF v3 file: metadata (types inferred: non-negative integers as u32, other
 * numbers as f32, integer arrays as i32, or given explicitly as {@link GgufTypedValue}), then
 * tensor infos and data aligned to 32 bytes. Tensors are written in the given order, one at a
 * time.
 *
 * @throws {@link ModelError} `SHAPE_MISMATCH` for data of the wrong size, `INVALID_ARGUMENT`
 *   for metadata of no GGUF type, `IO` on write failure.
 */
export async function writeGguf(
  path: string,
  metadata: ReadonlyMap<string, unknown> | Readonly<Record<string, unknown>>,
  tensors: readonly GgufTensorToWrite[],
): Promise<void> {
  const alignment = 32;
  const entries = metadata instanceof Map ? [...metadata.entries()] : Object.entries(metadata);
  const h = new ByteSink();
  h.u32(0x46554747);
  h.u32(3);
  h.u64(tensors.length);
  const hasAlign = entries.some(([k]) => k === 'general.alignment');
  h.u64(entries.length + (hasAlign ? 0 : 1));
  if (!hasAlign) {
    h.string('general.alignment');
    h.u32(VALUE_TYPES.indexOf('u32'));
    h.u32(alignment);
  }
  for (const [key, raw] of entries) {
    const v = inferValue(raw, key);
    h.string(key);
    h.u32(VALUE_TYPES.indexOf(v.type));
    if (v.type === 'array') {
      h.u32(VALUE_TYPES.indexOf(v.itemType));
      h.u64(v.value.length);
      for (const x of v.value) h.scalar(v.itemType, x);
    } else h.scalar(v.type, v.value);
  }
  let rel = 0;
  for (const t of tensors) {
    h.string(t.name);
    h.u32(t.shape.length);
    for (let d = t.shape.length - 1; d >= 0; d--) h.u64(t.shape[d]!);
    h.u32(GGML_TYPE_ID[t.dtype]);
    h.u64(rel);
    const len = storedByteLength(t);
    rel += Math.ceil(len / alignment) * alignment;
  }
  const headerBytes = h.finish();
  const pad = (n: number) => new Uint8Array((alignment - (n % alignment)) % alignment);
  await writeFileWith(path, async (fh) => {
    await fh.write(headerBytes);
    await fh.write(pad(headerBytes.byteLength));
    for (const t of tensors) {
      const bytes = await tensorBytes(t, 'GGUF tensor');
      await fh.write(bytes);
      await fh.write(pad(bytes.byteLength));
    }
  });
}

/**
 * Applies llama.cpp's Q/K row permutation (HF rotate-half order → GGUF interleaved order) to a
 * row-major tensor of `rows × rowLen` values grouped in heads of `headDim` rows: canonical row
 * `s × headDim/2 + i` of each head moves to row `2i + s`.
 */
export function permuteQkRows(values: Float32Array, rows: number, headDim: number): Float32Array {
  const rowLen = values.length / rows;
  const out = new Float32Array(values.length);
  const half = headDim / 2;
  for (let h = 0; h < rows; h += headDim) {
    for (let s = 0; s < 2; s++) {
      for (let i = 0; i < half; i++) {
        const src = (h + s * half + i) * rowLen;
        out.set(values.subarray(src, src + rowLen), (h + 2 * i + s) * rowLen);
      }
    }
  }
  return out;
}
