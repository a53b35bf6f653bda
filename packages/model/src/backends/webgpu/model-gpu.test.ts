import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadModel } from '../../model/model.js';
import { maxRelDiff } from '../../testing/compare.js';
import { goldenFixtureSuite } from '../../testing/golden-suite.js';
import {
  mergePlans,
  releaseTestGpu,
  seqPlan,
  tempCheckpoint,
  testGpu,
  tinyConfig,
} from '../../testing/model.js';
import { modelSuite } from '../../testing/model-suite.js';

modelSuite('webgpu');

describe('WebGPU forward vs CPU forward', () => {
  const config = tinyConfig({
    architecture: 'qwen2',
    attentionBias: true,
    tieWordEmbeddings: true,
  });
  let ckpt: Awaited<ReturnType<typeof tempCheckpoint>>;
  beforeAll(async () => {
    ckpt = await tempCheckpoint(config, 7);
  });
  afterAll(() => ckpt?.cleanup());

  it.each([
    ['f16', undefined],
    ['f32', 'int8'],
    ['int8', undefined],
  ] as const)(
    'agree on a mixed batch (KV %s, weights %s), QKV bias and tied embeddings',
    async (kvFormat, weightQuant) => {
      const opts = {
        numBlocks: 16,
        blockSize: 16,
        kvFormat,
        weightQuant,
        weightDtype: 'f16' as const,
      };
      const cpu = await loadModel(ckpt.dir, { ...opts, backend: 'cpu' });
      const gpu = await loadModel(ckpt.dir, { ...opts, backend: 'webgpu', gpu: await testGpu() });
      const toks = Array.from({ length: 40 }, (_, i) => (i * 13 + 5) % config.vocabSize);
      const warm = seqPlan(toks.slice(0, 20), 0, [3, 4], 16);
      const step = mergePlans([
        seqPlan(toks.slice(20, 30), 20, [3, 4], 16),
        seqPlan([toks[0] as number], 0, [9], 16),
        seqPlan(toks.slice(5, 40), 0, [10, 11, 12], 16, 'last'),
      ]);
      for (const plan of [warm, step]) {
        const a = await cpu.forward(plan);
        const b = await gpu.forward(plan);
        expect(maxRelDiff(b, a)).toBeLessThan(2e-4);
      }
      await cpu.destroy();
      await gpu.destroy();
    },
  );
});

goldenFixtureSuite('webgpu', 'WebGPU backend');

afterAll(releaseTestGpu);
