import { ModelError } from '../../errors.js';
import { basename } from '../base-name.js';
import type { PositionalSource } from '../checkpoint-reader.js';
import { GGUF_SCALAR_SIZES, GGUF_VALUE_TYPES, type GgufValueType } from './value-types.js';

/** Longest metadata string accepted (a chat template or an embedded `tokenizer.json`). */
export const MAX_STRING = 64 * 1024 * 1024;
/** Longest metadata key or tensor name (llama.cpp refuses tensor names of 64 bytes or more). */
export const MAX_NAME = 64 * 1024;
/**
 * Memory a parsed header may take. A 256k-token vocabulary with its merges, scores and types
 * takes about 20 MiB; sizes in a corrupt or hostile file (2^28 array items, forty 64 MiB
 * strings in a sparse file) must fail here, not in V8's heap.
 */
export const MAX_HEADER_MEMORY = 256 * 1024 * 1024;
/** Estimated bytes of one number in a parsed array (a JS array slot and its double). */
const NUMBER_ITEM_MEMORY = 16;
/** Estimated bytes of one string besides its characters (its V8 header and array slot). */
const STRING_MEMORY = 32;

/**
 * Buffered sequential reader over positional reads, so a header never needs the whole file.
 * Every length and count is checked against the bytes left in the file and against
 * {@link MAX_HEADER_MEMORY} before anything is allocated for it.
 */
export class GgufByteReader {
  private buf = new Uint8Array(0);
  private view = new DataView(this.buf.buffer);
  private bufStart = 0;
  /** Estimated memory taken so far by what was parsed. */
  private held = 0;
  pos = 0;
  constructor(
    private readonly fh: PositionalSource,
    private readonly size: number,
    private readonly file: string,
  ) {}

  /** Bytes of the file after the read position. */
  remaining(): number {
    return this.size - this.pos;
  }

  /**
   * Counts `bytes` of memory against {@link MAX_HEADER_MEMORY}, before they are allocated.
   * @throws {@link ModelError} `MALFORMED_FILE` naming `what` when the header would exceed it.
   */
  hold(bytes: number, what: string): void {
    this.held += bytes;
    if (this.held > MAX_HEADER_MEMORY) {
      throw new ModelError(
        'MALFORMED_FILE',
        `${basename(this.file)}: ${what} takes the header past its limit of ${MAX_HEADER_MEMORY / 2 ** 20} MiB in memory`,
        { details: { file: this.file, field: what } },
      );
    }
  }

  /**
   * Reads a u64 count of items that take at least `minItemBytes` each in the file, and checks
   * that they fit in what is left of it.
   * @throws {@link ModelError} `MALFORMED_FILE` above `limit`, `TRUNCATED_FILE` when the items
   *   cannot fit in the rest of the file; both name `what`.
   */
  async count(what: string, minItemBytes: number, limit: number): Promise<number> {
    const n = await this.safeU64(what, limit);
    if (n * minItemBytes > this.remaining()) {
      throw new ModelError(
        'TRUNCATED_FILE',
        `${basename(this.file)}: ${what} ${n} needs at least ${n * minItemBytes} bytes, the file has ${this.remaining()} left`,
        { details: { file: this.file, field: what } },
      );
    }
    return n;
  }

  // Node's Buffer#toString decodes short UTF-8 strings several times faster than TextDecoder;
  // browsers have only the latter.
  private decode: (start: number, end: number) => string = () => '';

  /** Whether the next `n` bytes are already in the window (no await needed). */
  buffered(n: number): boolean {
    return this.pos >= this.bufStart && this.pos + n <= this.bufStart + this.buf.byteLength;
  }

  async ensure(n: number, what: string): Promise<void> {
    if (this.pos + n > this.size) {
      throw new ModelError(
        'TRUNCATED_FILE',
        `${basename(this.file)}: ${what} at byte ${this.pos} runs past the end of the ${this.size}-byte file`,
        { details: { file: this.file, field: what } },
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
    this.decode = utf8Decoder(b);
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
        { details: { file: this.file, field: what } },
      );
    }
    return Number(v);
  }

  async string(what: string, limit = MAX_STRING): Promise<string> {
    const n = await this.safeU64(`${what} length`, limit);
    await this.ensure(n, what);
    this.hold(STRING_MEMORY + 2 * n, what);
    const s = this.decode(this.at(), this.at() + n);
    this.pos += n;
    return s;
  }

  async scalar(type: Exclude<GgufValueType, 'array'>, what: string): Promise<unknown> {
    if (type === 'string') return this.string(what);
    await this.ensure(GGUF_SCALAR_SIZES[type]!, what);
    return this.scalarSync(type);
  }

  /** Reads a non-string scalar that {@link ensure} already brought into the window. */
  scalarSync(type: Exclude<GgufValueType, 'array' | 'string'>): unknown {
    const o = this.at();
    const d = this.view;
    this.pos += GGUF_SCALAR_SIZES[type]!;
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
  async array(itemType: Exclude<GgufValueType, 'array'>, what: string): Promise<unknown[]> {
    const isString = itemType === 'string';
    const n = await this.count(
      `${what} array length`,
      isString ? 8 : GGUF_SCALAR_SIZES[itemType]!,
      Number.MAX_SAFE_INTEGER,
    );
    this.hold(n * (isString ? STRING_MEMORY : NUMBER_ITEM_MEMORY), `${what} (${n} items)`);
    const arr = new Array<unknown>(n);
    if (isString) {
      for (let j = 0; j < n; j++) {
        if (!this.buffered(8)) await this.ensure(8, `${what}[${j}] length`);
        const lo = this.view.getUint32(this.at(), true);
        const hi = this.view.getUint32(this.at() + 4, true);
        if (hi !== 0 || lo > MAX_STRING) {
          throw new ModelError(
            'MALFORMED_FILE',
            `${basename(this.file)}: ${what}[${j}] length ${hi * 2 ** 32 + lo} exceeds the limit ${MAX_STRING}`,
            { details: { file: this.file, field: `${what}[${j}]` } },
          );
        }
        this.pos += 8;
        const l = lo;
        if (!this.buffered(l)) await this.ensure(l, `${what}[${j}]`);
        this.hold(2 * l, `${what}[${j}]`);
        const o = this.at();
        arr[j] = this.decode(o, o + l);
        this.pos += l;
      }
      return arr;
    }
    const size = GGUF_SCALAR_SIZES[itemType]!;
    for (let j = 0; j < n; j++) {
      if (!this.buffered(size)) await this.ensure(size, `${what}[${j}]`);
      arr[j] = this.scalarSync(itemType);
    }
    return arr;
  }

  async valueType(what: string): Promise<GgufValueType> {
    const t = await this.u32(what);
    const name = GGUF_VALUE_TYPES[t];
    if (!name) {
      throw new ModelError(
        'MALFORMED_FILE',
        `${basename(this.file)}: ${what} has unknown value type ${t}`,
        { details: { file: this.file, field: what } },
      );
    }
    return name;
  }
}

function utf8Decoder(b: Uint8Array): (start: number, end: number) => string {
  if (typeof Buffer === 'function') {
    const nb = Buffer.from(b.buffer, b.byteOffset, b.byteLength);
    return (start, end) => nb.toString('utf8', start, end);
  }
  const td = new TextDecoder();
  return (start, end) => td.decode(b.subarray(start, end));
}
