import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeModelConfig } from '../../config.js';
import { expectModelError } from '../../testing/checkpoint.js';
import { basename } from '../base-name.js';
import { writeRandomCheckpoint } from '../random-checkpoint.js';
import { convertToGguf } from './convert.js';
import { openGgufBytes, openGgufCheckpoint } from './reader.js';

const config = makeModelConfig({
  hiddenSize: 64,
  intermediateSize: 96,
  numLayers: 2,
  numHeads: 4,
  numKvHeads: 2,
  vocabSize: 384,
});

let root: string;
const files: Record<'F32' | 'Q8_0', { path: string; bytes: Uint8Array }> = {} as never;
beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'kvasir-gguf-bytes-'));
  await writeRandomCheckpoint(join(root, 'hf'), config, 11);
  for (const dtype of ['F32', 'Q8_0'] as const) {
    const path = join(root, `${dtype}.gguf`);
    await convertToGguf(join(root, 'hf'), path, { dtype });
    files[dtype] = { path, bytes: new Uint8Array(await readFile(path)) };
  }
});
afterAll(async () => {
  await rm(root, { recursive: true, force: true });
});

describe('openGgufBytes', () => {
  it.each(['F32', 'Q8_0'] as const)(
    'gives what the file reader gives for a %s GGUF (config, tensors, un-permuted Q/K bytes)',
    async (dtype) => {
      const { path, bytes } = files[dtype];
      const fromFile = await openGgufCheckpoint(path);
      // An ArrayBuffer as fetch() returns it, not the Uint8Array itself.
      const fromBytes = await openGgufBytes(bytes.slice().buffer, { name: 'tiny.gguf' });
      try {
        expect(fromBytes.format).toBe('gguf');
        expect(fromBytes.path).toBe('tiny.gguf');
        expect(fromBytes.config).toEqual(fromFile.config);
        expect([...fromBytes.tensors.values()]).toEqual([...fromFile.tensors.values()]);
        expect(fromBytes.metadata).toEqual(fromFile.metadata);
        for (const name of fromFile.tensors.keys()) {
          expect(await fromBytes.readTensorBytes(name)).toEqual(
            await fromFile.readTensorBytes(name),
          );
        }
      } finally {
        await fromFile.close();
        await fromBytes.close();
      }
    },
  );

  it('streams the same chunks as the file reader for any chunk bound', async () => {
    const { path, bytes } = files.Q8_0;
    const fromFile = await openGgufCheckpoint(path);
    const fromBytes = await openGgufBytes(bytes);
    const names = [...fromFile.tensors.keys()];
    const collect = async (r: typeof fromFile, name: string, max: number) => {
      const out: Uint8Array[] = [];
      for await (const c of r.readChunks(name, { maxChunkBytes: max })) out.push(c);
      return out;
    };
    try {
      await fc.assert(
        fc.asyncProperty(
          fc.constantFrom(...names),
          fc.integer({ min: 1, max: 1 << 16 }),
          async (name, max) => {
            expect(await collect(fromBytes, name, max)).toEqual(await collect(fromFile, name, max));
          },
        ),
        { numRuns: 40 },
      );
    } finally {
      await fromFile.close();
      await fromBytes.close();
    }
  });

  it('refuses a truncated file, a bad magic and a value that is not bytes', async () => {
    const { bytes } = files.F32;
    await expectModelError(
      openGgufBytes(bytes.subarray(0, bytes.byteLength - 100), { name: 'cut.gguf' }),
      'TRUNCATED_FILE',
      'cut.gguf',
    );
    const bad = bytes.slice();
    bad[0] = 0;
    await expectModelError(openGgufBytes(bad), 'MALFORMED_FILE', 'model.gguf: not a GGUF file');
    await expectModelError(
      openGgufBytes('model.gguf' as unknown as Uint8Array),
      'INVALID_ARGUMENT',
      '[object String]',
    );
  });

  it('fails reads after close with IO', async () => {
    const r = await openGgufBytes(files.F32.bytes);
    await r.close();
    await expectModelError(r.readTensorBytes('model.norm.weight'), 'IO', 'closed');
  });
});

describe('basename', () => {
  it('takes the last segment of POSIX and Windows paths', () => {
    expect(basename('/a/b/model.gguf')).toBe('model.gguf');
    expect(basename('C:\\models\\m.gguf')).toBe('m.gguf');
    expect(basename('dir/sub/')).toBe('sub');
    expect(basename('m.gguf')).toBe('m.gguf');
  });
});
