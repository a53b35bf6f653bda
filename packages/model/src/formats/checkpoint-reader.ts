import { open } from 'node:fs/promises';
import { expectedTensors, type ModelConfig } from '../config.js';
import { fileIoError, ModelError } from '../errors.js';
import { basename } from './base-name.js';
import { decodeToF32, dtypeByteLength, dtypeUnitBytes, type TensorDtype } from './dtype.js';
import { unpermuteQkRows } from './gguf/qk-permute.js';

/** Description of one tensor in a checkpoint, under its canonical Hugging Face name. */
export interface TensorInfo {
  /** Canonical HF name (`model.layers.3.self_attn.q_proj.weight`), also for GGUF files. */
  readonly name: string;
  /** Stored element type. */
  readonly dtype: TensorDtype;
  /** Shape in HF (PyTorch, row-major) order: `[out_features, in_features]` for projections. */
  readonly shape: readonly number[];
  /** Exact byte length of the stored tensor. */
  readonly byteLength: number;
}

/** Options of {@link CheckpointReader.readChunks}. */
export interface ReadChunksOptions {
  /**
   * Upper bound on each chunk's size in bytes (default 8 MiB). Chunks are whole multiples of
   * a unit that is itself a multiple of 4 bytes and of the dtype's element/block size (and, for
   * GGUF Q/K tensors, of a head's rows); only the last chunk may be shorter. A bound below one
   * unit is raised to one unit.
   */
  readonly maxChunkBytes?: number;
}

/**
 * A checkpoint opened for streaming: its config, its tensors under canonical HF names, and
 * bounded-size reads. Implementations never hold a whole file in memory; bytes come from
 * positional reads of open file handles. Every tensor the config needs has been checked to
 * exist with the right shape and a supported dtype when the reader is returned.
 *
 * Bytes are in the canonical HF layout whatever the file format: GGUF's Q/K row permutation
 * is undone on the fly.
 */
export interface CheckpointReader {
  /** `safetensors` for an HF directory, `gguf` for a GGUF file. */
  readonly format: 'safetensors' | 'gguf';
  /** Path the checkpoint was opened from. */
  readonly path: string;
  /** The validated model config. */
  readonly config: ModelConfig;
  /** Every tensor, in file order, under canonical HF names. */
  readonly tensors: ReadonlyMap<string, TensorInfo>;
  /** Sum of the byte lengths of every tensor (what a progress bar counts). */
  readonly totalBytes: number;
  /**
   * Metadata of the file: the safetensors `__metadata__` map, or every GGUF key/value
   * (arrays included). Empty when the file has none.
   */
  readonly metadata: ReadonlyMap<string, unknown>;
  /**
   * The tensor's description.
   * @throws {@link ModelError} `MISSING_TENSOR` when absent.
   */
  tensor(name: string): TensorInfo;
  /**
   * Streams a tensor's bytes as chunks of bounded size (see {@link ReadChunksOptions}); each
   * chunk is a fresh array the caller may keep.
   * @throws {@link ModelError} `MISSING_TENSOR`, `TRUNCATED_FILE` or `IO`.
   */
  readChunks(name: string, options?: ReadChunksOptions): AsyncIterable<Uint8Array>;
  /**
   * Reads a whole tensor into `target` starting at `targetOffset`.
   * @throws {@link ModelError} `INVALID_ARGUMENT` when the target is too small, `MISSING_TENSOR`, `IO`.
   */
  readInto(name: string, target: Uint8Array, targetOffset?: number): Promise<void>;
  /** Reads a whole tensor's raw bytes (small tensors and tests). */
  readTensorBytes(name: string): Promise<Uint8Array>;
  /** Reads a whole tensor decoded to float32 (Q8_0 dequantized). For small tensors and tests. */
  readTensorF32(name: string): Promise<Float32Array>;
  /** Closes every file handle. Reads after `close` fail with `IO`. */
  close(): Promise<void>;
}

/**
 * What the readers need of a file: positional reads, its size, and closing it. Node's
 * `FileHandle` is one; {@link bytesSource} makes one of bytes already in memory.
 */
export interface PositionalSource {
  /** Reads up to `length` bytes at `position` into `buffer[offset..]`; 0 bytes read past the end. */
  read(
    buffer: Uint8Array,
    offset: number,
    length: number,
    position: number,
  ): Promise<{ bytesRead: number }>;
  stat(): Promise<{ size: number }>;
  close(): Promise<void>;
}

/**
 * A {@link PositionalSource} over bytes in memory (a fetched file in a browser). Reads copy
 * out of `bytes`, which is neither copied nor modified.
 * @internal
 */
export function bytesSource(bytes: Uint8Array): PositionalSource {
  return {
    async read(buffer, offset, length, position) {
      const end = Math.min(bytes.byteLength, position + length);
      const n = Math.max(0, end - position);
      if (n > 0) buffer.set(bytes.subarray(position, end), offset);
      return { bytesRead: n };
    },
    async stat() {
      return { size: bytes.byteLength };
    },
    async close() {},
  };
}

/** Where a tensor's bytes live, for {@link FileCheckpointReader}. */
export interface TensorLocation {
  /** File holding the tensor. */
  readonly file: string;
  /** Absolute byte offset of the tensor's first byte in that file. */
  readonly offset: number;
  /**
   * Row permutation applied on read: the tensor's rows are grouped in heads of `headRows`
   * rows; stored row `2i + s` of a head is canonical row `s × headRows/2 + i` (GGUF Q/K).
   */
  readonly unpermuteHeadRows?: number;
}

const DEFAULT_CHUNK = 8 * 1024 * 1024;

function gcd(a: number, b: number): number {
  while (b) [a, b] = [b, a % b];
  return a;
}

/**
 * Shared implementation of {@link CheckpointReader} over positional reads of files.
 * Format readers (safetensors, GGUF) parse headers, then hand the locations here.
 * @internal
 */
export class FileCheckpointReader implements CheckpointReader {
  readonly format: 'safetensors' | 'gguf';
  readonly path: string;
  readonly config: ModelConfig;
  readonly tensors: ReadonlyMap<string, TensorInfo>;
  readonly totalBytes: number;
  readonly metadata: ReadonlyMap<string, unknown>;
  private readonly locations: ReadonlyMap<string, TensorLocation>;
  private readonly handles = new Map<string, Promise<PositionalSource>>();
  private closed = false;

  constructor(args: {
    format: 'safetensors' | 'gguf';
    path: string;
    config: ModelConfig;
    tensors: Map<string, TensorInfo>;
    locations: Map<string, TensorLocation>;
    metadata: Map<string, unknown>;
    handles?: Map<string, PositionalSource>;
  }) {
    this.format = args.format;
    this.path = args.path;
    this.config = args.config;
    this.tensors = args.tensors;
    this.locations = args.locations;
    this.metadata = args.metadata;
    let total = 0;
    for (const t of args.tensors.values()) total += t.byteLength;
    this.totalBytes = total;
    for (const [f, h] of args.handles ?? []) this.handles.set(f, Promise.resolve(h));
  }

  tensor(name: string): TensorInfo {
    const t = this.tensors.get(name);
    if (!t) {
      throw new ModelError('MISSING_TENSOR', `${basename(this.path)}: no tensor "${name}"`, {
        details: { tensor: name, file: this.path },
      });
    }
    return t;
  }

  private handle(file: string): Promise<PositionalSource> {
    if (this.closed) {
      return Promise.reject(new ModelError('IO', `checkpoint ${this.path} is closed`));
    }
    let h = this.handles.get(file);
    if (!h) {
      h = open(file, 'r').catch((e: unknown) => {
        throw fileIoError('cannot open', file, e);
      });
      this.handles.set(file, h);
    }
    return h;
  }

  private async readExact(
    fh: PositionalSource,
    file: string,
    tensor: string,
    target: Uint8Array,
    targetOffset: number,
    length: number,
    position: number,
  ): Promise<void> {
    let done = 0;
    while (done < length) {
      const { bytesRead } = await fh.read(
        target,
        targetOffset + done,
        length - done,
        position + done,
      );
      if (bytesRead === 0) {
        throw new ModelError(
          'TRUNCATED_FILE',
          `${basename(file)}: tensor "${tensor}" ends past the end of the file (read ${done} of ${length} bytes)`,
          { details: { tensor, file } },
        );
      }
      done += bytesRead;
    }
  }

  private chunkUnit(info: TensorInfo, loc: TensorLocation): number {
    let unit = dtypeUnitBytes(info.dtype);
    unit = (unit * 4) / gcd(unit, 4);
    if (loc.unpermuteHeadRows) {
      const rowBytes = info.byteLength / info.shape[0]!;
      const headBytes = loc.unpermuteHeadRows * rowBytes;
      unit = (unit * headBytes) / gcd(unit, headBytes);
    }
    return unit;
  }

  async *readChunks(name: string, options?: ReadChunksOptions): AsyncIterable<Uint8Array> {
    const info = this.tensor(name);
    const loc = this.locations.get(name)!;
    const fh = await this.handle(loc.file);
    const unit = this.chunkUnit(info, loc);
    const max = options?.maxChunkBytes ?? DEFAULT_CHUNK;
    const chunk = Math.max(unit, Math.floor(max / unit) * unit);
    for (let start = 0; start < info.byteLength; start += chunk) {
      const len = Math.min(chunk, info.byteLength - start);
      const buf = new Uint8Array(len);
      await this.readExact(fh, loc.file, name, buf, 0, len, loc.offset + start);
      yield loc.unpermuteHeadRows
        ? unpermuteQkRows(buf, info.byteLength / info.shape[0]!, loc.unpermuteHeadRows)
        : buf;
    }
  }

  async readInto(name: string, target: Uint8Array, targetOffset = 0): Promise<void> {
    const info = this.tensor(name);
    if (targetOffset < 0 || targetOffset + info.byteLength > target.byteLength) {
      throw new ModelError(
        'INVALID_ARGUMENT',
        `readInto("${name}"): ${info.byteLength} bytes do not fit at offset ${targetOffset} of a ${target.byteLength}-byte buffer`,
      );
    }
    const loc = this.locations.get(name)!;
    if (!loc.unpermuteHeadRows) {
      const fh = await this.handle(loc.file);
      await this.readExact(fh, loc.file, name, target, targetOffset, info.byteLength, loc.offset);
      return;
    }
    let at = targetOffset;
    for await (const c of this.readChunks(name)) {
      target.set(c, at);
      at += c.byteLength;
    }
  }

  async readTensorBytes(name: string): Promise<Uint8Array> {
    const out = new Uint8Array(this.tensor(name).byteLength);
    await this.readInto(name, out);
    return out;
  }

  async readTensorF32(name: string): Promise<Float32Array> {
    const info = this.tensor(name);
    return decodeToF32(info.dtype, await this.readTensorBytes(name));
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    const hs = [...this.handles.values()];
    this.handles.clear();
    for (const h of hs) {
      try {
        await (await h).close();
      } catch {
        // A handle that failed to open has nothing to close.
      }
    }
  }
}

/**
 * Checks that every tensor the config needs is present with the expected shape, and that each
 * tensor's byte length matches its dtype and shape.
 *
 * @param source - file or directory named in error messages.
 * @throws {@link ModelError} `INVALID_CONFIG` for more layers than the checkpoint has tensors;
 *   `MISSING_TENSOR` or `SHAPE_MISMATCH`, naming the tensor.
 */
export function validateCheckpointTensors(
  config: ModelConfig,
  tensors: ReadonlyMap<string, TensorInfo>,
  source: string,
): void {
  // Every layer has several tensors: a layer count above the number of tensors is a corrupt
  // count, refused before the per-layer list of expected tensors is built.
  if (config.numLayers > tensors.size) {
    throw new ModelError(
      'INVALID_CONFIG',
      `${source}: the config has ${config.numLayers} layers but the checkpoint holds only ${tensors.size} tensors`,
      { details: { file: source, numLayers: config.numLayers, tensors: tensors.size } },
    );
  }
  for (const t of tensors.values()) {
    const n = t.shape.reduce((a, b) => a * b, 1);
    let expected: number;
    try {
      expected = dtypeByteLength(t.dtype, n);
    } catch {
      expected = -1;
    }
    if (expected !== t.byteLength) {
      throw new ModelError(
        'SHAPE_MISMATCH',
        `${source}: tensor "${t.name}" has ${t.byteLength} bytes but ${t.dtype}[${t.shape.join(', ')}] needs ${expected < 0 ? 'a multiple of 32 values' : expected}`,
        { details: { tensor: t.name, file: source } },
      );
    }
  }
  for (const e of expectedTensors(config)) {
    const t = tensors.get(e.name);
    if (!t) {
      throw new ModelError('MISSING_TENSOR', `${source}: missing tensor "${e.name}"`, {
        details: { tensor: e.name, file: source },
      });
    }
    if (t.shape.length !== e.shape.length || t.shape.some((d, i) => d !== e.shape[i])) {
      throw new ModelError(
        'SHAPE_MISMATCH',
        `${source}: tensor "${e.name}" has shape [${t.shape.join(', ')}], the config needs [${e.shape.join(', ')}]`,
        { details: { tensor: e.name, file: source, shape: t.shape, expected: e.shape } },
      );
    }
    if (t.dtype === 'Q8_0' && t.shape.length === 1) {
      throw new ModelError(
        'UNSUPPORTED_DTYPE',
        `${source}: tensor "${e.name}" is a vector stored as Q8_0; only matrices may be quantized`,
        { details: { tensor: e.name, file: source } },
      );
    }
  }
}

/** Options of {@link openCheckpoint}. */
export interface OpenCheckpointOptions {
  /**
   * Replace or complete the config found in the checkpoint (e.g. extra eos ids from
   * `generation_config.json`). Applied before tensor validation.
   */
  readonly configOverride?: (config: ModelConfig) => ModelConfig;
}
