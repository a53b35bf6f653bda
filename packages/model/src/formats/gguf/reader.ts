import { type FileHandle, open } from 'node:fs/promises';
import { MODEL_CONFIG_LIMITS } from '../../config.js';
import { fileIoError, ModelError } from '../../errors.js';
import { basename } from '../base-name.js';
import {
  bytesSource,
  type CheckpointReader,
  FileCheckpointReader,
  type OpenCheckpointOptions,
  type PositionalSource,
  type TensorInfo,
  type TensorLocation,
  validateCheckpointTensors,
} from '../checkpoint-reader.js';
import { decodeToF32 } from '../dtype.js';
import { addFusedRows } from '../fused-rows.js';
import { checkRegularFile } from '../regular-file.js';
import { configFromGguf, GGUF_PERMUTED_QK } from './config-from-metadata.js';
import type { GgufTensorEntry } from './header.js';
import { readGgufHeader } from './header.js';
import { ggufExpertTensor, ggufFusedTensor, ggufToHfName, hfExpertName } from './tensor-names.js';

/**
 * Opens a GGUF checkpoint (GGUF v2/v3, architecture llama, qwen2 or mistral3; F32/F16/BF16 tensors and
 * GGML's block formats Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K–Q6_K, IQ4_NL and MXFP4, mixed per tensor as
 * llama-quantize's `_S`/`_M`/`_L` presets mix them). Tensors are exposed under canonical HF
 * names and shapes; llama's (and mistral3's) Q/K rows, which llama.cpp's converter permutes for its interleaved
 * RoPE, are un-permuted on read (whole rows of blocks) so the bytes equal the HF tensors. Block
 * tensors keep their blocks: `readChunks` returns the file's bytes, `readTensorF32` decodes.
 *
 * @throws {@link ModelError} `IO` (also for a path that is a FIFO, a device or a directory),
 *   `MALFORMED_FILE`, `TRUNCATED_FILE`, `UNSUPPORTED_DTYPE` (a type such as IQ2_XXS, naming the
 *   tensor and the type),
 *   `UNSUPPORTED_ARCHITECTURE`, `INVALID_CONFIG`, `MISSING_TENSOR`, `SHAPE_MISMATCH`.
 */
export async function openGgufCheckpoint(
  path: string,
  options?: OpenCheckpointOptions,
): Promise<CheckpointReader> {
  await checkRegularFile(path, 'checkpoint');
  let fh: FileHandle;
  try {
    fh = await open(path, 'r');
  } catch (e) {
    throw fileIoError('cannot open', path, e);
  }
  try {
    return await openGguf(fh, path, options);
  } catch (e) {
    await fh.close().catch(() => undefined);
    throw e;
  }
}

/** Options of {@link openGgufBytes}. */
export interface OpenGgufBytesOptions extends OpenCheckpointOptions {
  /** The name the reader's `path` and error messages give the file (default `model.gguf`). */
  readonly name?: string;
}

/**
 * Opens a GGUF checkpoint held in memory: a file fetched in a browser, where there is no file
 * system. Everything else is {@link openGgufCheckpoint}'s: the same validation, canonical
 * names and un-permuted Q/K rows. Tensors are read out of `bytes` in bounded chunks as from a
 * file; `bytes` is not copied, and must not change while the reader is in use.
 *
 * @throws {@link ModelError} `INVALID_ARGUMENT` when `bytes` is not an `ArrayBuffer` or
 *   `Uint8Array`; `MALFORMED_FILE`, `TRUNCATED_FILE`, `UNSUPPORTED_DTYPE`,
 *   `UNSUPPORTED_ARCHITECTURE`, `INVALID_CONFIG`, `MISSING_TENSOR`, `SHAPE_MISMATCH` as
 *   {@link openGgufCheckpoint}.
 */
export async function openGgufBytes(
  bytes: ArrayBuffer | Uint8Array,
  options?: OpenGgufBytesOptions,
): Promise<CheckpointReader> {
  let view: Uint8Array;
  if (bytes instanceof Uint8Array) view = bytes;
  else if (bytes instanceof ArrayBuffer) view = new Uint8Array(bytes);
  else {
    throw new ModelError(
      'INVALID_ARGUMENT',
      `openGgufBytes: expected an ArrayBuffer or Uint8Array, got ${Object.prototype.toString.call(bytes)}`,
    );
  }
  return openGguf(bytesSource(view), options?.name ?? 'model.gguf', options);
}

async function openGguf(
  fh: PositionalSource,
  path: string,
  options: OpenCheckpointOptions | undefined,
): Promise<CheckpointReader> {
  const header = await readGgufHeader(fh, path);
  const ropeFactors = await readPairFactors(fh, path, header.tensors, 'rope_freqs.weight');
  const longRope = {
    long: await readPairFactors(fh, path, header.tensors, 'rope_factors_long.weight'),
    short: await readPairFactors(fh, path, header.tensors, 'rope_factors_short.weight'),
  };
  let config = configFromGguf(header.metadata, header.tensors, path, ropeFactors, longRope);
  if (options?.configOverride) config = options.configOverride(config);
  const permute = GGUF_PERMUTED_QK.has(String(header.metadata.get('general.architecture')));
  const tensors = new Map<string, TensorInfo>();
  const locations = new Map<string, TensorLocation>();
  for (const t of header.tensors) {
    const expert = config.moe ? ggufExpertTensor(t.name) : undefined;
    if (expert) {
      splitExperts(t, expert, config.moe?.numExperts ?? 0, path, tensors, locations);
      continue;
    }
    const fused = config.architecture === 'phi3' ? ggufFusedTensor(t.name, config) : undefined;
    if (fused) {
      const fusedInfo = {
        name: t.name,
        dtype: t.dtype,
        shape: [...t.dims].reverse(),
        byteLength: t.byteLength,
      };
      addFusedRows(fusedInfo, { file: path, offset: t.offset }, fused, tensors, locations);
      continue;
    }
    const name = ggufToHfName(t.name, config.architecture) ?? t.name;
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
}

/**
 * A small 1-D f32 tensor of per-pair RoPE factors (`rope_freqs`, LongRoPE's
 * `rope_factors_long` / `_short`), or `undefined` when the file has none. Its shape is checked
 * before its bytes are read, so a corrupt shape cannot make this allocate a weight matrix.
 */
async function readPairFactors(
  fh: PositionalSource,
  path: string,
  entries: readonly GgufTensorEntry[],
  name: string,
): Promise<Float32Array | undefined> {
  const entry = entries.find((t) => t.name === name);
  if (!entry) return undefined;
  const pairs = entry.dims.reduce((a, b) => a * b, 1);
  if (entry.dims.length !== 1 || pairs > MODEL_CONFIG_LIMITS.headDim / 2) {
    throw new ModelError(
      'SHAPE_MISMATCH',
      `${basename(path)}: tensor "${name}" has shape [${[...entry.dims].reverse().join(', ')}]; it holds one factor per frequency pair of a head (at most ${MODEL_CONFIG_LIMITS.headDim / 2})`,
      { details: { file: path, tensor: name } },
    );
  }
  const b = new Uint8Array(entry.byteLength);
  await fh.read(b, 0, b.byteLength, entry.offset);
  return decodeToF32(entry.dtype, b);
}

/**
 * A 3-D expert tensor (ggml dims `[cols, rows, experts]`, expert-major) as one `[rows, cols]`
 * tensor per expert (a 2-D expert bias as one vector per expert), each at its slice of the file: every backend loads, stores and multiplies
 * an expert as any other matrix, straight from its blocks.
 */
function splitExperts(
  t: GgufTensorEntry,
  expert: NonNullable<ReturnType<typeof ggufExpertTensor>>,
  numExperts: number,
  path: string,
  tensors: Map<string, TensorInfo>,
  locations: Map<string, TensorLocation>,
): void {
  // Biases (gpt-oss) are one vector per expert: ggml dims [cols, experts].
  const bias = expert.kind === 'bias';
  const dims = bias ? 2 : 3;
  const experts = t.dims[dims - 1];
  if (t.dims.length !== dims || experts !== numExperts || t.byteLength % experts !== 0) {
    throw new ModelError(
      'SHAPE_MISMATCH',
      `${basename(path)}: tensor "${t.name}" has shape [${[...t.dims].reverse().join(', ')}]; a mixture-of-experts ${expert.kind} is [experts (${numExperts}), ${bias ? 'cols' : 'rows, cols'}]`,
      { details: { file: path, tensor: t.name } },
    );
  }
  const shape = [...t.dims].reverse().slice(1);
  const slice = t.byteLength / experts;
  for (let e = 0; e < experts; e++) {
    const name = hfExpertName(expert.layer, e, expert.proj, expert.kind);
    tensors.set(name, { name, dtype: t.dtype, shape, byteLength: slice });
    locations.set(name, { file: path, offset: t.offset + e * slice });
  }
}
