import { ModelError } from '../../errors.js';
import {
  storedByteLength,
  type TensorToWrite,
  tensorBytes,
  writeFileWith,
} from '../tensor-write.js';
import { ggmlTypeId } from './ggml-types.js';
import { GGUF_VALUE_TYPES, type GgufTypedValue, type GgufValueType } from './value-types.js';

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

/** Growable little-endian byte buffer for the header. */
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
    h.u32(GGUF_VALUE_TYPES.indexOf('u32'));
    h.u32(alignment);
  }
  for (const [key, raw] of entries) {
    const v = inferValue(raw, key);
    h.string(key);
    h.u32(GGUF_VALUE_TYPES.indexOf(v.type));
    if (v.type === 'array') {
      h.u32(GGUF_VALUE_TYPES.indexOf(v.itemType));
      h.u64(v.value.length);
      for (const x of v.value) h.scalar(v.itemType, x);
    } else h.scalar(v.type, v.value);
  }
  let rel = 0;
  for (const t of tensors) {
    h.string(t.name);
    h.u32(t.shape.length);
    for (let d = t.shape.length - 1; d >= 0; d--) h.u64(t.shape[d]!);
    h.u32(ggmlTypeId(t.dtype));
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
