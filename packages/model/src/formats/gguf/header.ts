import { GGML_BLOCK_FORMATS } from '@kvasir/quantizer/ggml';
import { ModelError } from '../../errors.js';
import { basename } from '../base-name.js';
import type { PositionalSource } from '../checkpoint-reader.js';
import { dtypeByteLength, isBlockDtype, type TensorDtype } from '../dtype.js';
import { GgufByteReader, MAX_NAME } from './byte-reader.js';
import { dtypeOfGgmlType, ggmlTypeName } from './ggml-types.js';

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

/**
 * Most tensors or metadata keys a header may declare: a Llama-family GGUF has about ten
 * tensors per layer and a few dozen keys; the largest models have under 2,000 tensors.
 */
const MAX_ENTRIES = 1 << 16;
/** Fewest bytes a tensor info takes: an empty name (8), one dimension (4 + 8), type and offset. */
const MIN_TENSOR_INFO_BYTES = 8 + 4 + 8 + 4 + 8;
/** Fewest bytes a metadata entry takes: an empty key (8), its type (4), a one-byte value. */
const MIN_KV_BYTES = 8 + 4 + 1;
/** Estimated memory of one parsed tensor info besides its name (the object, its dims). */
const TENSOR_INFO_MEMORY = 256;
/** Longest tensor name, in bytes: llama.cpp's `GGML_MAX_NAME` (64) less its terminating NUL. */
const MAX_TENSOR_NAME = 63;
const SUPPORTED = `F32, F16, BF16, ${Object.keys(GGML_BLOCK_FORMATS).join(', ')}`;
/**
 * Reads and validates a GGUF header (metadata and tensor infos) through buffered positional
 * reads; tensor data is never read.
 *
 * Every count and length (tensors, keys, arrays, strings, dimensions, offsets) is checked against
 * the bytes left in the file and a sane bound before anything is allocated for it, so a corrupt
 * or hostile size fails with a typed error naming the field instead of exhausting memory.
 *
 * @throws {@link ModelError} `MALFORMED_FILE` (bad magic, version, counts, alignment, overlap,
 *   a header taking more than 256 MiB of memory), `TRUNCATED_FILE` (a count, a string or a
 *   tensor past EOF, naming it), `UNSUPPORTED_DTYPE` (naming the tensor and its ggml type).
 */
export async function readGgufHeader(fh: PositionalSource, file: string): Promise<GgufHeader> {
  const size = (await fh.stat()).size;
  const c = new GgufByteReader(fh, size, file);
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
  const tensorCount = await c.safeU64('tensor count', MAX_ENTRIES);
  const kvCount = await c.count('metadata count', MIN_KV_BYTES, MAX_ENTRIES);
  if (tensorCount * MIN_TENSOR_INFO_BYTES + kvCount * MIN_KV_BYTES > c.remaining()) {
    throw new ModelError(
      'TRUNCATED_FILE',
      `${basename(file)}: tensor count ${tensorCount} and metadata count ${kvCount} need more than the ${c.remaining()} bytes left in the file`,
      { details: { file, field: 'tensor count' } },
    );
  }
  const metadata = new Map<string, unknown>();
  for (let i = 0; i < kvCount; i++) {
    const key = await c.string('metadata key', MAX_NAME);
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
      metadata.set(key, await c.array(itemType, `metadata "${key}"`));
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
  const names = new Set<string>();
  for (let i = 0; i < tensorCount; i++) {
    const name = await c.string('tensor name', MAX_TENSOR_NAME);
    checkTensorName(file, name, names);
    c.hold(TENSOR_INFO_MEMORY, `tensor "${name}"`);
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
    if (dims.reduce((a, b) => a * b, 1) > Number.MAX_SAFE_INTEGER) {
      throw new ModelError(
        'MALFORMED_FILE',
        `${basename(file)}: tensor "${name}" dimensions [${dims.join(', ')}] hold more than 2^53 values`,
        { details: { file, tensor: name } },
      );
    }
    const typeId = await c.u32(`tensor "${name}" type`);
    const dtype = dtypeOfGgmlType(typeId);
    if (!dtype) {
      throw new ModelError(
        'UNSUPPORTED_DTYPE',
        `${basename(file)}: tensor "${name}" is ${ggmlTypeName(typeId)} (GGML type ${typeId}); supported: ${SUPPORTED}`,
        { details: { file, tensor: name, ggmlType: typeId, typeName: ggmlTypeName(typeId) } },
      );
    }
    if (isBlockDtype(dtype) && dims[0]! % GGML_BLOCK_FORMATS[dtype].blockSize !== 0) {
      throw new ModelError(
        'MALFORMED_FILE',
        `${basename(file)}: ${dtype} tensor "${name}" rows of ${dims[0]} are not whole blocks`,
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

/**
 * A tensor name as llama.cpp's loader accepts it: printable and unique. A name with a control
 * byte is a length field that ran into its text (a rename the model would silently not use:
 * `output.weight` missing reads as tied embeddings), and a repeated name hides a tensor.
 */
function checkTensorName(file: string, name: string, seen: Set<string>): void {
  // biome-ignore lint/suspicious/noControlCharactersInRegex: control bytes are what it rejects
  const bad = /[\u0000-\u001f\u007f\ufffd]/.exec(name);
  if (bad) {
    throw new ModelError(
      'MALFORMED_FILE',
      `${basename(file)}: tensor name ${JSON.stringify(name)} holds the byte U+${bad[0].codePointAt(0)!.toString(16).padStart(4, '0')}, not a name`,
      { details: { file, tensor: name } },
    );
  }
  if (seen.has(name)) {
    throw new ModelError('MALFORMED_FILE', `${basename(file)}: tensor "${name}" appears twice`, {
      details: { file, tensor: name },
    });
  }
  seen.add(name);
}
