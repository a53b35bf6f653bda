import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeModelConfig } from '../../config.js';
import { expectModelError } from '../../testing/checkpoint.js';
import { writeRandomCheckpoint } from '../random-checkpoint.js';
import { convertToGguf } from './convert.js';
import { openGgufCheckpoint } from './reader.js';
import { GGUF_VALUE_TYPES } from './value-types.js';

const config = makeModelConfig({
  hiddenSize: 64,
  intermediateSize: 96,
  numLayers: 2,
  numHeads: 4,
  numKvHeads: 2,
  vocabSize: 384,
});

let root: string;
let tiny: Buffer;
beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'kvasir-gguf-config-'));
  await writeRandomCheckpoint(join(root, 'hf'), config, 5);
  await convertToGguf(join(root, 'hf'), join(root, 'tiny.gguf'));
  tiny = await readFile(join(root, 'tiny.gguf'));
});
afterAll(async () => {
  await rm(root, { recursive: true, force: true });
});

/** Byte offset of a u32 metadata value, found by its key in the tiny file. */
function u32ValueOffset(buf: Buffer, key: string): number {
  const at = buf.indexOf(Buffer.from(key, 'utf8'));
  expect(at).toBeGreaterThan(0);
  expect(buf.readUInt32LE(at + key.length)).toBe(GGUF_VALUE_TYPES.indexOf('u32'));
  return at + key.length + 4;
}

describe('a layer count the file cannot hold', () => {
  it('block_count 2^31 is refused at once as INVALID_CONFIG naming the key, not built layer by layer', async () => {
    const buf = Buffer.from(tiny);
    buf.writeUInt32LE(2 ** 31, u32ValueOffset(buf, 'llama.block_count'));
    const path = join(root, 'layers-2-31.gguf');
    await writeFile(path, buf);
    await expectModelError(
      openGgufCheckpoint(path),
      'INVALID_CONFIG',
      '"llama.block_count" is 2147483648; numLayers must be a positive integer up to 4096',
    );
  });

  it('a count within the limit but above the tensors present is refused before the per-layer list', async () => {
    const buf = Buffer.from(tiny);
    buf.writeUInt32LE(4000, u32ValueOffset(buf, 'llama.block_count'));
    const path = join(root, 'layers-4000.gguf');
    await writeFile(path, buf);
    await expectModelError(
      openGgufCheckpoint(path),
      'INVALID_CONFIG',
      'the config has 4000 layers but the checkpoint holds only 21 tensors',
    );
    // One layer too many is still the missing tensor it always was.
    buf.writeUInt32LE(3, u32ValueOffset(buf, 'llama.block_count'));
    await writeFile(path, buf);
    await expectModelError(
      openGgufCheckpoint(path),
      'MISSING_TENSOR',
      'model.layers.2.input_layernorm.weight',
    );
  });

  it('a head dim of 2^31 is refused before RoPE factors are sized by it', async () => {
    const buf = Buffer.from(tiny);
    buf.writeUInt32LE(2 ** 31, u32ValueOffset(buf, 'llama.attention.key_length'));
    const path = join(root, 'head-dim.gguf');
    await writeFile(path, buf);
    await expectModelError(openGgufCheckpoint(path), 'INVALID_CONFIG', 'attention.key_length');
  });
});
