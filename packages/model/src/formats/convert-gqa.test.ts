import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeModelConfig } from '../config.js';
import { ModelError } from '../errors.js';
import { convertToGqa } from './convert-gqa.js';
import { openCheckpoint } from './open-checkpoint.js';
import { writeRandomCheckpoint } from './random-checkpoint.js';

const mha = makeModelConfig({
  hiddenSize: 48,
  intermediateSize: 64,
  numLayers: 2,
  numHeads: 6,
  vocabSize: 300,
});

let root: string;
let src: string;
beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'kvasir-gqa-'));
  src = join(root, 'mha');
  await writeRandomCheckpoint(src, mha, 21);
});
afterAll(async () => {
  await rm(root, { recursive: true, force: true });
});

/** KV bytes per token as the cache stores them: 2 × layers × kv heads × head dim × bytes. */
const kvBytes = (c: { numLayers: number; numKvHeads: number; headDim: number }) =>
  2 * c.numLayers * c.numKvHeads * c.headDim * 2;

describe('convertToGqa', () => {
  it('pools groups of KV heads into their means and leaves every other tensor alone', async () => {
    const dst = join(root, 'gqa2');
    const res = await convertToGqa(src, dst, 2);
    expect(res.config.numKvHeads).toBe(2);
    expect(res.kvBytesRatio).toBeCloseTo(1 / 3, 12);
    const a = await openCheckpoint(src);
    const b = await openCheckpoint(dst);
    try {
      expect(kvBytes(b.config) / kvBytes(a.config)).toBeCloseTo(1 / 3, 12);
      expect({ ...b.config, numKvHeads: 6 }).toEqual(a.config);
      const hd = mha.headDim;
      for (const name of a.tensors.keys()) {
        const x = await a.readTensorF32(name);
        const y = await b.readTensorF32(name);
        if (!/self_attn\.[kv]_proj/.test(name)) {
          expect(y).toEqual(x);
          continue;
        }
        const cols = mha.hiddenSize;
        expect(b.tensor(name).shape).toEqual([2 * hd, cols]);
        // New head j, row d = mean of old heads 3j, 3j+1, 3j+2 at row d.
        for (let j = 0; j < 2; j++)
          for (let d = 0; d < hd; d++)
            for (let c = 0; c < cols; c++) {
              let s = 0;
              for (let t = 0; t < 3; t++) s += x[((3 * j + t) * hd + d) * cols + c]!;
              expect(y[(j * hd + d) * cols + c]).toBeCloseTo(s / 3, 6);
            }
      }
    } finally {
      await a.close();
      await b.close();
    }
    // The tokenizer comes along.
    expect(await readFile(join(dst, 'tokenizer.json'), 'utf8')).toBe(
      await readFile(join(src, 'tokenizer.json'), 'utf8'),
    );
  });

  it('makes MQA with one KV head, and is the identity at the source head count', async () => {
    const mqa = await convertToGqa(src, join(root, 'mqa'), 1);
    expect(mqa.kvBytesRatio).toBeCloseTo(1 / 6, 12);
    await convertToGqa(src, join(root, 'same'), 6);
    expect(
      (await readFile(join(root, 'same', 'model.safetensors'))).subarray(8).toString('latin1'),
    ).toContain('"dtype":"F32"');
    const a = await openCheckpoint(src);
    const b = await openCheckpoint(join(root, 'same'));
    try {
      for (const name of a.tensors.keys()) {
        expect(
          Buffer.from(await b.readTensorBytes(name)).equals(
            Buffer.from(await a.readTensorBytes(name)),
          ),
        ).toBe(true);
      }
    } finally {
      await a.close();
      await b.close();
    }
  });

  it('refuses head counts that do not divide the source', async () => {
    for (const n of [4, 0, 1.5, 12]) {
      await expect(convertToGqa(src, join(root, `bad${n}`), n)).rejects.toSatisfy(
        (e: unknown) => ModelError.isInstance(e) && e.code === 'INVALID_ARGUMENT',
      );
    }
  });
});
