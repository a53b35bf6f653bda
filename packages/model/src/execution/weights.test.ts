import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { convertToGguf } from '../formats/gguf/convert.js';
import { openCheckpoint } from '../formats/open-checkpoint.js';
import { packWeight, unpackWeight } from '../kernels/weight-format.js';
import { tempCheckpoint, tinyConfig } from '../testing/model.js';
import { hostAllocator, loadWeights } from './weights.js';

describe('loadWeights', () => {
  const config = tinyConfig({ intermediateSize: 96 });
  let ckpt: Awaited<ReturnType<typeof tempCheckpoint>>;
  beforeAll(async () => {
    ckpt = await tempCheckpoint(config, 3);
  });
  afterAll(() => ckpt?.cleanup());

  it.each(['f32', 'f16', 'int8'] as const)(
    'packs %s the same whether streamed in tiny chunks and batches or whole',
    async (fmt) => {
      const reader = await openCheckpoint(ckpt.dir);
      const opts = fmt === 'int8' ? { weightQuant: 'int8' as const } : { weightDtype: fmt };
      const whole = await loadWeights(reader, hostAllocator(), opts);
      // 3 rows per batch and 100-byte reads: batches and chunks straddle rows and tensors.
      const tiny = await loadWeights(reader, hostAllocator(), {
        ...opts,
        maxChunkBytes: 100,
        maxBatchElements: 3 * config.hiddenSize,
      });
      expect(tiny).toEqual(whole);
      // gate/up interleaved by row, each packed exactly as the tensor alone would be.
      const gate = await reader.readTensorF32('model.layers.1.mlp.gate_proj.weight');
      const up = await reader.readTensorF32('model.layers.1.mlp.up_proj.weight');
      const gu = unpackWeight(whole.layers[1]?.gateUp as ReturnType<typeof packWeight>);
      const h = config.hiddenSize;
      const g = unpackWeight(packWeight(gate, config.intermediateSize, h, fmt));
      const u = unpackWeight(packWeight(up, config.intermediateSize, h, fmt));
      for (const j of [0, 1, 50, config.intermediateSize - 1]) {
        expect(Array.from(gu.subarray(2 * j * h, (2 * j + 1) * h))).toEqual(
          Array.from(g.subarray(j * h, (j + 1) * h)),
        );
        expect(Array.from(gu.subarray((2 * j + 1) * h, (2 * j + 2) * h))).toEqual(
          Array.from(u.subarray(j * h, (j + 1) * h)),
        );
      }
      expect(whole.lmHead).not.toBe(whole.embed);
      await reader.close();
    },
  );

  it('stores F32 tensors as f32 and quantized GGUF (Q8_0) tensors as f16 by default', async () => {
    const gguf = join(ckpt.root, 'q8.gguf');
    await convertToGguf(ckpt.dir, gguf, { dtype: 'Q8_0' });
    const hf = await openCheckpoint(ckpt.dir);
    const q8 = await openCheckpoint(gguf);
    const a = await loadWeights(hf, hostAllocator());
    const b = await loadWeights(q8, hostAllocator());
    expect(a.layers[0]?.q.format).toBe('f32');
    expect(b.layers[0]?.q.format).toBe('f16');
    await hf.close();
    await q8.close();
  });

  it('refuses int8 when the group size does not divide the columns, naming the tensor', async () => {
    const reader = await openCheckpoint(ckpt.dir);
    await expect(
      loadWeights(reader, hostAllocator(), { weightQuant: 'int8', groupSize: 12 }),
    ).rejects.toMatchObject({
      code: 'INVALID_CONFIG',
      details: { tensor: 'model.embed_tokens.weight' },
    });
    await reader.close();
  });
});
