import { type FileHandle, open, stat } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { type ModelConfig, parseHfConfig } from '../config.js';
import { fileIoError, ModelError } from '../errors.js';
import { phi3FusedParts } from '../families/phi3.js';
import {
  FileCheckpointReader,
  type OpenCheckpointOptions,
  type TensorInfo,
  type TensorLocation,
  validateCheckpointTensors,
} from './checkpoint-reader.js';
import { dtypeByteLength, type TensorDtype } from './dtype.js';
import { addFusedRows } from './fused-rows.js';
import { checkRegularFile, readRegularTextFile } from './regular-file.js';
import {
  storedByteLength,
  type TensorToWrite,
  tensorBytes,
  writeFileWith,
} from './tensor-write.js';

/** One tensor entry of a safetensors header. */
export interface SafetensorsEntry {
  /** Tensor name as stored. */
  readonly name: string;
  /** Element type (only F32/F16/BF16 are accepted). */
  readonly dtype: TensorDtype;
  /** Shape, row-major. */
  readonly shape: readonly number[];
  /** Absolute byte offset of the first byte in the file. */
  readonly offset: number;
  /** Byte length. */
  readonly byteLength: number;
}

/** A parsed safetensors header. */
export interface SafetensorsHeader {
  /** Entries in header order. */
  readonly tensors: readonly SafetensorsEntry[];
  /** The `__metadata__` string map (empty when absent). */
  readonly metadata: Readonly<Record<string, string>>;
  /** Absolute offset where the data section starts (8 + header length). */
  readonly dataStart: number;
}

const DTYPES: Record<string, TensorDtype | undefined> = { F32: 'F32', F16: 'F16', BF16: 'BF16' };
/** Refuse headers above this size: real ones are well under a few MiB. */
const MAX_HEADER = 100 * 1024 * 1024;

function malformed(file: string, message: string, tensor?: string): ModelError {
  return new ModelError('MALFORMED_FILE', `${basename(file)}: ${message}`, {
    details: tensor === undefined ? { file } : { file, tensor },
  });
}

/**
 * Reads and validates the header of a safetensors file through positional reads (the data
 * section is never read).
 *
 * @param fh - open handle of the file (kept open).
 * @param file - its path, for messages.
 * @throws {@link ModelError} `TRUNCATED_FILE` (header or a tensor past EOF), `MALFORMED_FILE`
 *   (bad header length, bad JSON, tensors that overlap or do not tile the data section up to
 *   the end of the file), `UNSUPPORTED_DTYPE` naming the tensor.
 */
export async function readSafetensorsHeader(
  fh: FileHandle,
  file: string,
): Promise<SafetensorsHeader> {
  const size = (await fh.stat()).size;
  if (size < 8) {
    throw new ModelError(
      'TRUNCATED_FILE',
      `${basename(file)}: ${size} bytes, too short for a safetensors header`,
      {
        details: { file },
      },
    );
  }
  const lenBuf = new Uint8Array(8);
  await fh.read(lenBuf, 0, 8, 0);
  const headerLen = new DataView(lenBuf.buffer).getBigUint64(0, true);
  if (headerLen > BigInt(MAX_HEADER)) {
    throw malformed(file, `bad header length ${headerLen} (limit ${MAX_HEADER})`);
  }
  const hl = Number(headerLen);
  if (8 + hl > size) {
    throw new ModelError(
      'TRUNCATED_FILE',
      `${basename(file)}: header length ${hl} runs past the end of the ${size}-byte file`,
      { details: { file } },
    );
  }
  const headerBuf = new Uint8Array(hl);
  await fh.read(headerBuf, 0, hl, 8);
  let header: unknown;
  try {
    header = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(headerBuf));
  } catch (e) {
    throw malformed(file, `header is not valid UTF-8 JSON (${(e as Error).message})`);
  }
  if (typeof header !== 'object' || header === null || Array.isArray(header)) {
    throw malformed(file, 'header is not a JSON object');
  }
  const dataStart = 8 + hl;
  const dataSize = size - dataStart;
  const tensors: SafetensorsEntry[] = [];
  let metadata: Record<string, string> = {};
  for (const [name, raw] of Object.entries(header as Record<string, unknown>)) {
    if (name === '__metadata__') {
      if (typeof raw === 'object' && raw !== null) metadata = raw as Record<string, string>;
      continue;
    }
    const e = raw as { dtype?: unknown; shape?: unknown; data_offsets?: unknown };
    if (typeof e !== 'object' || e === null)
      throw malformed(file, `tensor "${name}" has no entry object`, name);
    const dtype = typeof e.dtype === 'string' ? DTYPES[e.dtype] : undefined;
    if (!dtype) {
      throw new ModelError(
        'UNSUPPORTED_DTYPE',
        `${basename(file)}: tensor "${name}" has dtype ${JSON.stringify(e.dtype)}; supported: F32, F16, BF16`,
        { details: { file, tensor: name, dtype: e.dtype } },
      );
    }
    const shape = e.shape;
    if (
      !Array.isArray(shape) ||
      shape.some((d) => typeof d !== 'number' || !Number.isInteger(d) || d < 0)
    ) {
      throw malformed(file, `tensor "${name}" has a bad shape ${JSON.stringify(shape)}`, name);
    }
    const offs = e.data_offsets;
    if (
      !Array.isArray(offs) ||
      offs.length !== 2 ||
      offs.some((o) => typeof o !== 'number' || !Number.isInteger(o) || o < 0) ||
      offs[1] < offs[0]
    ) {
      throw malformed(file, `tensor "${name}" has bad data_offsets ${JSON.stringify(offs)}`, name);
    }
    const [begin, end] = offs as [number, number];
    if (end > dataSize) {
      throw new ModelError(
        'TRUNCATED_FILE',
        `${basename(file)}: tensor "${name}" data [${begin}, ${end}) runs past the end of the data section (${dataSize} bytes)`,
        { details: { file, tensor: name } },
      );
    }
    const n = (shape as number[]).reduce((a, b) => a * b, 1);
    const need = dtypeByteLength(dtype, n);
    if (need !== end - begin) {
      throw new ModelError(
        'SHAPE_MISMATCH',
        `${basename(file)}: tensor "${name}" spans ${end - begin} bytes but ${dtype}[${(shape as number[]).join(', ')}] needs ${need}`,
        { details: { file, tensor: name } },
      );
    }
    tensors.push({
      name,
      dtype,
      shape: shape as number[],
      offset: dataStart + begin,
      byteLength: need,
    });
  }
  checkTiling(file, tensors, dataStart, size);
  return { tensors, metadata, dataStart };
}

/**
 * Checks that the tensors tile the data section exactly, as the safetensors reference reader
 * does: in offset order each starts where the previous ends, the first at the section's start
 * and the last at the end of the file. A header length off by a few bytes otherwise shifts
 * every tensor and loads without a word (an F32 model then answers only "\u0000").
 */
function checkTiling(
  file: string,
  tensors: readonly SafetensorsEntry[],
  dataStart: number,
  size: number,
): void {
  const sorted = [...tensors].sort((a, b) => a.offset - b.offset || a.byteLength - b.byteLength);
  let end = dataStart;
  let prev: SafetensorsEntry | undefined;
  for (const cur of sorted) {
    if (cur.offset < end) {
      throw malformed(file, `tensors "${prev!.name}" and "${cur.name}" overlap`, cur.name);
    }
    if (cur.offset > end) {
      const where = prev ? `between "${prev.name}" and "${cur.name}"` : `before "${cur.name}"`;
      throw malformed(
        file,
        `data bytes [${end - dataStart}, ${cur.offset - dataStart}) ${where} belong to no tensor (is the header length right?)`,
        cur.name,
      );
    }
    end = cur.offset + cur.byteLength;
    prev = cur;
  }
  if (end !== size) {
    throw malformed(
      file,
      `the last ${size - end} bytes of the file belong to no tensor (is the header length right?)`,
    );
  }
}

async function readJson(path: string): Promise<unknown> {
  const text = await readRegularTextFile(path, 'checkpoint file');
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new ModelError(
      'MALFORMED_FILE',
      `${basename(path)} is not valid JSON: ${(e as Error).message}`,
      {
        cause: e,
        details: { file: path },
      },
    );
  }
}

async function exists(path: string): Promise<boolean> {
  try {
    await stat(path);
    return true;
  } catch {
    return false;
  }
}

/**
 * Opens a Hugging Face checkpoint directory: `config.json` plus `model.safetensors`, or the
 * shards listed by `model.safetensors.index.json`. Headers are parsed and every tensor the
 * config needs is validated; tensor data is only read on demand.
 *
 * @throws {@link ModelError} `IO` (missing files), `INVALID_CONFIG`, `UNSUPPORTED_ARCHITECTURE`,
 *   `MALFORMED_FILE`, `TRUNCATED_FILE`, `UNSUPPORTED_DTYPE`, `MISSING_TENSOR`, `SHAPE_MISMATCH`.
 */
export async function openSafetensorsCheckpoint(
  dir: string,
  options?: OpenCheckpointOptions,
): Promise<FileCheckpointReader> {
  let config = parseHfConfig(await readJson(join(dir, 'config.json')));
  if (options?.configOverride) config = options.configOverride(config);
  const indexPath = join(dir, 'model.safetensors.index.json');
  let files: string[];
  let weightMap: Record<string, string> | undefined;
  if (await exists(indexPath)) {
    const index = (await readJson(indexPath)) as { weight_map?: unknown };
    if (typeof index?.weight_map !== 'object' || index.weight_map === null) {
      throw new ModelError('MALFORMED_FILE', `${indexPath}: no "weight_map" object`, {
        details: { file: indexPath },
      });
    }
    weightMap = index.weight_map as Record<string, string>;
    files = [...new Set(Object.values(weightMap))];
  } else if (await exists(join(dir, 'model.safetensors'))) {
    files = ['model.safetensors'];
  } else {
    throw new ModelError(
      'IO',
      `${dir}: neither model.safetensors nor model.safetensors.index.json found`,
      {
        details: { file: dir },
      },
    );
  }
  const tensors = new Map<string, TensorInfo>();
  const locations = new Map<string, TensorLocation>();
  const metadata = new Map<string, unknown>();
  const handles = new Map<string, FileHandle>();
  try {
    for (const f of files) {
      const path = join(dir, f);
      await checkRegularFile(path, 'safetensors shard');
      let fh: FileHandle;
      try {
        fh = await open(path, 'r');
      } catch (e) {
        throw fileIoError('cannot open shard', path, e);
      }
      handles.set(path, fh);
      const header = await readSafetensorsHeader(fh, path);
      for (const [k, v] of Object.entries(header.metadata)) metadata.set(k, v);
      for (const e of header.tensors) {
        if (weightMap && weightMap[e.name] !== f) continue;
        tensors.set(e.name, {
          name: e.name,
          dtype: e.dtype,
          shape: e.shape,
          byteLength: e.byteLength,
        });
        locations.set(e.name, { file: path, offset: e.offset });
      }
    }
    if (weightMap) {
      for (const [name, f] of Object.entries(weightMap)) {
        if (!tensors.has(name)) {
          throw new ModelError(
            'MISSING_TENSOR',
            `${dir}: index maps "${name}" to ${f}, which does not hold it`,
            {
              details: { tensor: name, file: join(dir, f) },
            },
          );
        }
      }
    }
    if (config.architecture === 'phi3') splitPhi3Fused(config, tensors, locations);
    validateCheckpointTensors(config, tensors, dir);
  } catch (e) {
    for (const h of handles.values()) await h.close().catch(() => undefined);
    throw e;
  }
  return new FileCheckpointReader({
    format: 'safetensors',
    path: dir,
    config,
    tensors,
    locations,
    metadata,
    handles,
  });
}

/**
 * Phi-3's fused `self_attn.qkv_proj` and `mlp.gate_up_proj` (transformers' `Phi3ForCausalLM`)
 * as the separate projections every backend loads, each at its rows of the file.
 */
function splitPhi3Fused(
  config: ModelConfig,
  tensors: Map<string, TensorInfo>,
  locations: Map<string, TensorLocation>,
): void {
  const parts = phi3FusedParts(config);
  for (let l = 0; l < config.numLayers; l++) {
    for (const [hf, gguf] of [
      ['self_attn.qkv_proj', 'attn_qkv'],
      ['mlp.gate_up_proj', 'ffn_up'],
    ] as const) {
      const name = `model.layers.${l}.${hf}.weight`;
      const info = tensors.get(name);
      const at = locations.get(name);
      if (!info || !at) continue;
      const named = (parts[gguf] ?? []).map((p) => ({
        name: `model.layers.${l}.${p.proj}.weight`,
        rows: p.rows,
      }));
      addFusedRows(info, at, named, tensors, locations);
      tensors.delete(name);
      locations.delete(name);
    }
  }
}

export type { TensorToWrite } from './tensor-write.js';

/**
 * Writes a safetensors file (header padded to 8 bytes, tensors in the given order).
 *
 * @throws {@link ModelError} `UNSUPPORTED_DTYPE` for Q8_0, `SHAPE_MISMATCH` for wrong data
 *   sizes, `IO` when the file cannot be written.
 */
export async function writeSafetensors(
  path: string,
  tensors: readonly TensorToWrite[],
  metadata?: Readonly<Record<string, string>>,
): Promise<void> {
  const header: Record<string, unknown> = {};
  if (metadata && Object.keys(metadata).length > 0) header.__metadata__ = metadata;
  let offset = 0;
  for (const t of tensors) {
    if (t.dtype === 'Q8_0') {
      throw new ModelError(
        'UNSUPPORTED_DTYPE',
        `safetensors cannot store Q8_0 tensor "${t.name}"`,
        {
          details: { tensor: t.name },
        },
      );
    }
    const len = storedByteLength(t);
    header[t.name] = { dtype: t.dtype, shape: [...t.shape], data_offsets: [offset, offset + len] };
    offset += len;
  }
  let json = JSON.stringify(header);
  while ((Buffer.byteLength(json) + 8) % 8 !== 0) json += ' ';
  const headerBytes = Buffer.from(json, 'utf8');
  const prefix = new Uint8Array(8);
  new DataView(prefix.buffer).setBigUint64(0, BigInt(headerBytes.byteLength), true);
  await writeFileWith(path, async (fh) => {
    await fh.write(prefix);
    await fh.write(headerBytes);
    for (const t of tensors) await fh.write(await tensorBytes(t));
  });
}
