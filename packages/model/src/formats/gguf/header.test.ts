import { open as fsOpen, mkdtemp, readFile, rm, truncate, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeModelConfig } from '../../config.js';
import { ModelError } from '../../errors.js';
import { expectModelError } from '../../testing/checkpoint.js';
import { writeRandomCheckpoint } from '../random-checkpoint.js';
import { convertToGguf } from './convert.js';
import { readGgufHeader } from './header.js';
import { openGgufCheckpoint } from './reader.js';
import { GGUF_VALUE_TYPES } from './value-types.js';
import { writeGguf } from './writer.js';

const config = makeModelConfig({
  hiddenSize: 64,
  intermediateSize: 96,
  numLayers: 2,
  numHeads: 4,
  numKvHeads: 2,
  vocabSize: 384,
});
const MiB = 2 ** 20;
const type = (t: (typeof GGUF_VALUE_TYPES)[number]) => GGUF_VALUE_TYPES.indexOf(t);

let root: string;
let tiny: Buffer;
beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'kvasir-gguf-header-'));
  await writeRandomCheckpoint(join(root, 'hf'), config, 5);
  await convertToGguf(join(root, 'hf'), join(root, 'tiny.gguf'));
  tiny = await readFile(join(root, 'tiny.gguf'));
});
afterAll(async () => {
  await rm(root, { recursive: true, force: true });
});

/** Little-endian GGUF header fields, written one after the other. */
class HeaderBytes {
  private readonly parts: Buffer[] = [];
  u32(v: number): this {
    const b = Buffer.alloc(4);
    b.writeUInt32LE(v);
    this.parts.push(b);
    return this;
  }
  u64(v: number | bigint): this {
    const b = Buffer.alloc(8);
    b.writeBigUInt64LE(BigInt(v));
    this.parts.push(b);
    return this;
  }
  string(s: string): this {
    const b = Buffer.from(s, 'utf8');
    return this.u64(b.byteLength).bytes(b);
  }
  bytes(b: Buffer): this {
    this.parts.push(b);
    return this;
  }
  /** Magic, version 3, then the two counts. */
  start(tensors: number | bigint, kvs: number | bigint): this {
    return this.u32(0x46554747).u32(3).u64(tensors).u64(kvs);
  }
  finish(): Buffer {
    return Buffer.concat(this.parts);
  }
}

/** Writes `header`, then makes the file `size` bytes long (sparse: the rest reads as zeros). */
async function craft(name: string, header: Buffer, size = header.byteLength): Promise<string> {
  const path = join(root, name);
  await writeFile(path, header);
  if (size > header.byteLength) await truncate(path, size);
  return path;
}

/** Peak resident memory of this process so far, in bytes. */
const peakRss = () => process.resourceUsage().maxRSS * 1024;

async function refusal(path: string): Promise<ModelError> {
  const fh = await fsOpen(path, 'r');
  try {
    await readGgufHeader(fh, path);
  } catch (e) {
    expect(ModelError.isInstance(e), String(e)).toBe(true);
    return e as ModelError;
  } finally {
    await fh.close();
  }
  throw new Error(`${path} was read without an error`);
}

describe('GGUF sizes are checked before anything is allocated for them', () => {
  it('a metadata array of 2^28 items in a sparse file fails on the memory limit, naming the key', async () => {
    const header = new HeaderBytes()
      .start(0, 1)
      .string('big.array')
      .u32(type('array'))
      .u32(type('u32'))
      .u64(2 ** 28)
      .finish();
    // The file really holds 2^28 u32s (1 GiB of zeros), so only the memory bound refuses it.
    const path = await craft('array-2-28.gguf', header, header.byteLength + 2 ** 30);
    const before = peakRss();
    const e = await refusal(path);
    expect(e.code).toBe('MALFORMED_FILE');
    expect(e.message).toContain('metadata "big.array" (268435456 items) takes the header past');
    expect(e.message).toContain('256 MiB');
    expect(peakRss() - before).toBeLessThan(256 * MiB);
  });

  it('an array, a string or the counts larger than the rest of the file are TRUNCATED_FILE', async () => {
    const array = new HeaderBytes()
      .start(0, 1)
      .string('big.array')
      .u32(type('array'))
      .u32(type('f32'))
      .u64(2 ** 28)
      .finish();
    let e = await refusal(await craft('array-past-eof.gguf', array));
    expect(e.code).toBe('TRUNCATED_FILE');
    expect(e.message).toContain(
      'metadata "big.array" array length 268435456 needs at least 1073741824 bytes',
    );
    const string = new HeaderBytes()
      .start(0, 1)
      .string('big.string')
      .u32(type('string'))
      .u64(60 * MiB)
      .finish();
    e = await refusal(await craft('string-past-eof.gguf', string));
    expect(e.code).toBe('TRUNCATED_FILE');
    expect(e.message).toContain('metadata "big.string" at byte');
    e = await refusal(await craft('counts.gguf', new HeaderBytes().start(60_000, 0).finish()));
    expect(e.code).toBe('TRUNCATED_FILE');
    expect(e.message).toContain('tensor count 60000 and metadata count 0 need more than');
    e = await refusal(await craft('kv-count.gguf', new HeaderBytes().start(0, 2 ** 40).finish()));
    expect(e.code).toBe('MALFORMED_FILE');
    expect(e.message).toContain('metadata count 1099511627776 exceeds the limit 65536');
  });

  it('forty 64 MiB strings in a sparse file stop at the memory limit, well under the 2.5 GiB they claim', async () => {
    const path = join(root, 'strings.gguf');
    const fh = await fsOpen(path, 'w');
    let at = 0;
    const write = async (b: Buffer) => {
      await fh.write(b, 0, b.byteLength, at);
      at += b.byteLength;
    };
    try {
      await write(new HeaderBytes().start(0, 40).finish());
      for (let i = 0; i < 40; i++) {
        await write(
          new HeaderBytes()
            .string(`big.string.${i}`)
            .u32(type('string'))
            .u64(64 * MiB)
            .finish(),
        );
        at += 64 * MiB;
      }
    } finally {
      await fh.close();
    }
    await truncate(path, at);
    const before = peakRss();
    const e = await refusal(path);
    expect(e.code).toBe('MALFORMED_FILE');
    expect(e.message).toMatch(/metadata "big\.string\.\d+" takes the header past its limit/);
    expect(peakRss() - before).toBeLessThan(768 * MiB);
  });

  it('a 1 GiB rope_freqs tensor is refused by its shape before its bytes are read', async () => {
    // The tiny model's tensors, then a real-sized rope_freqs last whose dimension is patched.
    const fh = await fsOpen(join(root, 'tiny.gguf'), 'r');
    const h = await readGgufHeader(fh, 'tiny.gguf');
    await fh.close();
    const tensors = h.tensors.map((t) => ({
      name: t.name,
      dtype: t.dtype,
      shape: [...t.dims].reverse(),
      data: tiny.subarray(t.offset, t.offset + t.byteLength),
    }));
    tensors.push({
      name: 'rope_freqs.weight',
      dtype: 'F32',
      shape: [config.headDim / 2],
      data: Buffer.from(new Float32Array(config.headDim / 2).fill(1).buffer),
    });
    const path = join(root, 'rope-1g.gguf');
    await writeGguf(path, h.metadata, tensors);
    const fh2 = await fsOpen(path, 'r');
    const rope = (await readGgufHeader(fh2, path)).tensors.at(-1)!;
    await fh2.close();
    expect(rope.name).toBe('rope_freqs.weight');
    const buf = await readFile(path);
    const name = Buffer.from('rope_freqs.weight', 'utf8');
    const dim = buf.indexOf(name) + name.byteLength + 4;
    expect(buf.readBigUInt64LE(dim)).toBe(BigInt(config.headDim / 2));
    buf.writeBigUInt64LE(2n ** 28n, dim);
    await writeFile(path, buf);
    // The file holds the claimed 1 GiB (sparse), so the header alone is sound.
    await truncate(path, rope.offset + 2 ** 30);
    const before = peakRss();
    await expectModelError(
      openGgufCheckpoint(path),
      'SHAPE_MISMATCH',
      'tensor "rope_freqs.weight" has shape [268435456]',
    );
    expect(peakRss() - before).toBeLessThan(256 * MiB);
  });
});

describe('GGUF tensor names are checked as llama.cpp checks them', () => {
  /** The tiny model with its tensors renamed by `rename` (index, name) → name. */
  async function renamed(file: string, rename: (i: number, name: string) => string) {
    const fh = await fsOpen(join(root, 'tiny.gguf'), 'r');
    const h = await readGgufHeader(fh, 'tiny.gguf');
    await fh.close();
    const tensors = h.tensors.map((t, i) => ({
      name: rename(i, t.name),
      dtype: t.dtype,
      shape: [...t.dims].reverse(),
      data: tiny.subarray(t.offset, t.offset + t.byteLength),
    }));
    const path = join(root, file);
    await writeGguf(path, h.metadata, tensors);
    return path;
  }

  it('a name holding a NUL (a length field run into its text) is MALFORMED_FILE, naming the byte', async () => {
    const path = await renamed('nul.gguf', (_, n) =>
      n === 'output.weight' ? '\0utput.weight' : n,
    );
    const e = await refusal(path);
    expect(e.code).toBe('MALFORMED_FILE');
    expect(e.message).toContain('U+0000');
  });

  it('a repeated name is MALFORMED_FILE, naming the tensor', async () => {
    const path = await renamed('twice.gguf', (i, n) => (i === 1 ? 'token_embd.weight' : n));
    const e = await refusal(path);
    expect(e.code).toBe('MALFORMED_FILE');
    expect(e.message).toContain('"token_embd.weight" appears twice');
  });

  it('a name of 64 bytes or more is refused, 63 bytes is read', async () => {
    const long = (n: number) => `blk.9.${'x'.repeat(n - 6)}`;
    const e = await refusal(await renamed('n64.gguf', (i, n) => (i === 0 ? long(64) : n)));
    expect(e.code).toBe('MALFORMED_FILE');
    expect(e.message).toContain('tensor name length 64 exceeds the limit 63');
    const ok = await renamed('n63.gguf', (i, n) => (i === 0 ? long(63) : n));
    const fh = await fsOpen(ok, 'r');
    const h = await readGgufHeader(fh, ok);
    await fh.close();
    expect(h.tensors[0]!.name).toBe(long(63));
  });
});
