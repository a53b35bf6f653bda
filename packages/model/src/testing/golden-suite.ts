import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseHfConfig } from '../config.js';
import golden from '../fixtures/golden-logits.json' with { type: 'json' };
import { writeRandomCheckpoint } from '../formats/random-checkpoint.js';
import { loadModel } from '../model/model.js';
import { maxRelDiff } from './compare.js';
import { seqPlan, testGpu } from './model.js';

/**
 * The golden PyTorch fixture on one backend: each case's random checkpoint, prefilled on
 * `backend`, gives the logits transformers gave within 1e-4.
 */
export function goldenFixtureSuite(backend: 'cpu' | 'webgpu' | 'wasm', title: string): void {
  describe(`golden PyTorch fixture (${title})`, () => {
    it.each(golden.cases.map((c) => [c.name, c] as const))(
      '%s matches transformers within 1e-4',
      async (_n, c) => {
        const root = await mkdtemp(join(tmpdir(), 'kvasir-golden-'));
        try {
          await writeRandomCheckpoint(root, parseHfConfig(c.config), c.seed);
          const m = await loadModel(root, {
            backend,
            numBlocks: 4,
            blockSize: 16,
            kvFormat: 'f32',
            ...(backend === 'webgpu' ? { gpu: await testGpu() } : {}),
          });
          const logits = await m.forward(seqPlan(c.tokenIds, 0, [3], 16));
          expect(maxRelDiff(logits, Float32Array.from(c.logits.flat()))).toBeLessThan(1e-4);
          await m.destroy();
        } finally {
          await rm(root, { recursive: true, force: true });
        }
      },
    );
  });
}
