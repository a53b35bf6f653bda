import { open as fsOpen, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeModelConfig } from '../config.js';
import { ModelError } from '../errors.js';
import { ModelTokenizer } from '../tokenizer/tokenizer.js';
import type { CheckpointReader } from './checkpoint-reader.js';
import { convertToGguf } from './gguf/convert.js';
import { readGgufHeader } from './gguf/header.js';
import { openGgufBytes } from './gguf/reader.js';
import { openCheckpoint } from './open-checkpoint.js';
import { writeRandomCheckpoint } from './random-checkpoint.js';

const config = makeModelConfig({
  hiddenSize: 32,
  intermediateSize: 64,
  numLayers: 2,
  numHeads: 4,
  numKvHeads: 2,
  vocabSize: 320,
});
const MiB = 2 ** 20;

/** A valid file, the end of its header, and the offsets of the size fields in its header. */
interface Original {
  readonly bytes: Uint8Array;
  readonly headerEnd: number;
  readonly fields: readonly number[];
  /** Every tensor's bytes, under its canonical name. */
  readonly tensors: ReadonlyMap<string, Uint8Array>;
}

let root: string;
let gguf: Original;
let safetensors: Original & { readonly dir: string };

async function tensorBytes(reader: CheckpointReader): Promise<Map<string, Uint8Array>> {
  const out = new Map<string, Uint8Array>();
  for (const name of reader.tensors.keys()) out.set(name, await reader.readTensorBytes(name));
  return out;
}

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'kvasir-mutated-'));
  const hf = join(root, 'hf');
  await writeRandomCheckpoint(hf, config, 7);
  const ggufPath = join(root, 'tiny.gguf');
  await convertToGguf(hf, ggufPath, { dtype: 'Q8_0' });
  const fh = await fsOpen(ggufPath, 'r');
  const header = await readGgufHeader(fh, ggufPath);
  await fh.close();
  const bytes = await readFile(ggufPath);
  // The counts, then every numeric metadata value (the config's sizes) and tensor dimension.
  const fields = [8, 16];
  for (const [key, value] of header.metadata) {
    if (typeof value === 'number') fields.push(bytes.indexOf(key) + key.length + 4);
  }
  for (const t of header.tensors) fields.push(bytes.indexOf(t.name) + t.name.length + 4);
  const reader = await openGgufBytes(bytes);
  gguf = {
    bytes: new Uint8Array(bytes),
    headerEnd: header.dataStart,
    fields,
    tensors: await tensorBytes(reader),
  };
  await reader.close();
  // Real files pad their header with spaces to 8 bytes; pad this one by 8 more, so that a
  // header length a few bytes short still parses.
  const written = await readFile(join(hf, 'model.safetensors'));
  const json = written.subarray(8, 8 + Number(written.readBigUInt64LE(0)));
  const padded = Buffer.from(`${json.toString('utf8').trimEnd()}${' '.repeat(8)}`);
  const length = padded.byteLength + ((8 - (padded.byteLength % 8)) % 8);
  const st = new Uint8Array(8 + length + (written.byteLength - 8 - json.byteLength));
  new DataView(st.buffer).setBigUint64(0, BigInt(length), true);
  st.fill(0x20, 8, 8 + length);
  st.set(padded, 8);
  st.set(written.subarray(8 + json.byteLength), 8 + length);
  await writeFile(join(hf, 'model.safetensors'), st);
  const stReader = await openCheckpoint(hf);
  safetensors = {
    bytes: st,
    headerEnd: 8 + length,
    fields: [0],
    tensors: await tensorBytes(stReader),
    dir: hf,
  };
  await stReader.close();
});
afterAll(async () => {
  await rm(root, { recursive: true, force: true });
});

type Mutation =
  | { readonly kind: 'truncate'; readonly at: number }
  | { readonly kind: 'byte'; readonly at: number; readonly value: number }
  | { readonly kind: 'u32'; readonly at: number; readonly value: number }
  | { readonly kind: 'u64'; readonly at: number; readonly value: bigint }
  | { readonly kind: 'add'; readonly at: number; readonly value: number };

/**
 * Edits of a file aimed at its header, where the sizes are: a random byte, a u32 or u64
 * overwritten with a typical corrupt size, a size field off by a few (a header length one byte
 * short), or a truncation anywhere. Positions are anywhere in the header or one of its size
 * fields.
 */
function mutations(original: Original): fc.Arbitrary<Mutation[]> {
  const size = original.bytes.byteLength;
  const at = (width: number) =>
    fc.oneof(
      fc.constantFrom(...original.fields),
      fc.integer({ min: 0, max: original.headerEnd - width }),
    );
  const u32 = fc.oneof(
    fc.constantFrom(0, 1, 2 ** 24, 2 ** 28, 2 ** 31, 2 ** 32 - 1, size, size + 1),
    fc.nat(),
  );
  const u64 = fc.oneof(
    fc.constantFrom(0n, 2n ** 28n, 2n ** 31n, 2n ** 40n, 2n ** 63n, BigInt(size)),
    fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }),
  );
  const mutation: fc.Arbitrary<Mutation> = fc.oneof(
    fc.record({ kind: fc.constant('truncate' as const), at: fc.integer({ min: 0, max: size }) }),
    fc.record({ kind: fc.constant('byte' as const), at: at(1), value: fc.nat(255) }),
    fc.record({ kind: fc.constant('u32' as const), at: at(4), value: u32 }),
    fc.record({ kind: fc.constant('u64' as const), at: at(8), value: u64 }),
    fc.record({
      kind: fc.constant('add' as const),
      at: at(4),
      value: fc.integer({ min: -16, max: 16 }),
    }),
  );
  return fc.array(mutation, { minLength: 1, maxLength: 3 });
}

function mutate(original: Uint8Array, edits: readonly Mutation[]): Uint8Array {
  let bytes = original.slice();
  for (const m of edits) {
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    if (m.kind === 'truncate') bytes = bytes.subarray(0, Math.min(m.at, bytes.byteLength));
    else if (m.at + { byte: 1, u32: 4, u64: 8, add: 4 }[m.kind] > bytes.byteLength) continue;
    else if (m.kind === 'byte') view.setUint8(m.at, m.value);
    else if (m.kind === 'u32') view.setUint32(m.at, m.value, true);
    else if (m.kind === 'u64') view.setBigUint64(m.at, m.value, true);
    else view.setUint32(m.at, (view.getUint32(m.at, true) + m.value) >>> 0, true);
  }
  return bytes;
}

/**
 * Opens a mutated file with `open` and checks the outcome: a {@link ModelError}, or a reader
 * whose every tensor holds exactly the original's bytes (only the header was edited, so a file
 * that loads with other bytes was read at the wrong place, as a header length one byte short
 * once was). A tensor under a name the original lacks is a renamed one and must hold the bytes of
 * an original tensor missing from the file.
 */
async function check(
  original: Original,
  open: () => Promise<CheckpointReader>,
  more?: (reader: CheckpointReader) => void,
): Promise<void> {
  let reader: CheckpointReader | undefined;
  try {
    reader = await open();
    more?.(reader);
    const loaded = await tensorBytes(reader);
    // A mutated name is a renamed tensor: it must hold the bytes of an original tensor that is
    // not there under its own name.
    const renamed = [...original.tensors].filter(([name]) => !loaded.has(name));
    for (const [name, bytes] of loaded) {
      const own = original.tensors.get(name);
      if (own) expect(bytes, name).toEqual(own);
      else
        expect(
          renamed.some(([, b]) => equalBytes(b, bytes)),
          `renamed ${name}`,
        ).toBe(true);
    }
  } catch (e) {
    if (!ModelError.isInstance(e)) throw e;
  } finally {
    await reader?.close();
  }
}

function equalBytes(a: Uint8Array, b: Uint8Array): boolean {
  return a.byteLength === b.byteLength && a.every((v, i) => v === b[i]);
}

/** Peak resident memory of this process so far, in bytes. */
const peakRss = () => process.resourceUsage().maxRSS * 1024;

describe('mutated and truncated model files load or fail with a ModelError, in bounded memory', () => {
  it('GGUF (header, tensors and the tokenizer in its metadata)', async () => {
    const before = peakRss();
    await fc.assert(
      fc.asyncProperty(mutations(gguf), async (edits) => {
        await check(
          gguf,
          () => openGgufBytes(mutate(gguf.bytes, edits), { name: 'mutated.gguf' }),
          (reader) => ModelTokenizer.fromGguf(reader.metadata),
        );
      }),
      { numRuns: 200 },
    );
    expect(peakRss() - before).toBeLessThan(512 * MiB);
  });

  it('safetensors (header length, JSON, offsets)', async () => {
    const file = join(safetensors.dir, 'model.safetensors');
    const before = peakRss();
    try {
      await fc.assert(
        fc.asyncProperty(mutations(safetensors), async (edits) => {
          await writeFile(file, mutate(safetensors.bytes, edits));
          await check(safetensors, () => openCheckpoint(safetensors.dir));
        }),
        { numRuns: 200 },
      );
    } finally {
      await writeFile(file, safetensors.bytes);
    }
    expect(peakRss() - before).toBeLessThan(512 * MiB);
  });
});
