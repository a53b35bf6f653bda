import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ForwardPlan } from '../execution/forward-plan.js';
import { mergePlans, row, seqPlan, tempCheckpoint, tinyConfig } from '../testing/model.js';
import { loadModel, type Model } from './model.js';

const config = tinyConfig({ numLayers: 5 });
const BLOCK = 4;
const BLOCKS = 64;

function argmax(x: Float32Array): number {
  let b = 0;
  for (let i = 1; i < x.length; i++) if ((x[i] as number) > (x[b] as number)) b = i;
  return b;
}

/**
 * Greedy decoding of a batch: the prompts prefilled together, then `steps` decode steps of
 * every sequence together. Returns each sequence's tokens and every logits array.
 */
async function decodeBatch(
  model: Model,
  prompts: readonly number[][],
  steps: number,
): Promise<{ tokens: number[][]; logits: Float32Array[] }> {
  const vocab = config.vocabSize;
  let nextBlock = 0;
  const tables = prompts.map((p) =>
    Array.from({ length: Math.ceil((p.length + steps) / BLOCK) }, () => nextBlock++),
  );
  const tokens = prompts.map(() => [] as number[]);
  const logits: Float32Array[] = [];
  let plan: ForwardPlan = mergePlans(
    prompts.map((p, i) => seqPlan(p, 0, tables[i] as number[], BLOCK, 'last')),
  );
  for (let s = 0; s <= steps; s++) {
    const l = await model.forward(plan);
    logits.push(l);
    const next = prompts.map((_, i) => argmax(row(l, i, vocab)));
    for (const [i, t] of next.entries()) tokens[i]?.push(t);
    plan = mergePlans(
      prompts.map((p, i) =>
        seqPlan([next[i] as number], p.length + s, tables[i] as number[], BLOCK, 'last'),
      ),
    );
  }
  return { tokens, logits };
}

describe('a model split at random places over random batches', () => {
  let ckpt: Awaited<ReturnType<typeof tempCheckpoint>>;
  const whole: Partial<Record<'cpu' | 'wasm', Model>> = {};
  beforeAll(async () => {
    ckpt = await tempCheckpoint(config, 11);
    for (const backend of ['cpu', 'wasm'] as const) {
      whole[backend] = await loadModel(ckpt.dir, {
        backend,
        threads: 2,
        numBlocks: BLOCKS,
        blockSize: BLOCK,
        kvFormat: 'f16',
      });
    }
  });
  afterAll(async () => {
    for (const m of Object.values(whole)) await m?.destroy();
    await ckpt?.cleanup();
  });

  it('decodes the same tokens with the same logits as the whole model', async () => {
    // Cut points between the 5 layers: each subset gives a split into 1..5 shards.
    const cuts = fc.subarray([1, 2, 3, 4]);
    const prompts = fc.array(
      fc.array(fc.integer({ min: 0, max: config.vocabSize - 1 }), { minLength: 1, maxLength: 19 }),
      { minLength: 1, maxLength: 4 },
    );
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom('cpu' as const, 'wasm' as const),
        cuts,
        prompts,
        async (backend, at, batch) => {
          const bounds = [0, ...at, config.numLayers];
          const devices = bounds.slice(1).map((end, i) => ({
            backend,
            threads: 2,
            layers: { firstLayer: bounds[i] as number, numLayers: end - (bounds[i] as number) },
          }));
          const split = await loadModel(ckpt.dir, {
            devices,
            numBlocks: BLOCKS,
            blockSize: BLOCK,
            kvFormat: 'f16',
          });
          try {
            const want = await decodeBatch(whole[backend] as Model, batch, 3);
            const got = await decodeBatch(split, batch, 3);
            expect(got.tokens).toEqual(want.tokens);
            for (const [i, l] of got.logits.entries()) {
              expect(
                Buffer.from(l.buffer).equals(Buffer.from((want.logits[i] as Float32Array).buffer)),
              ).toBe(true);
            }
          } finally {
            await split.destroy();
          }
        },
      ),
      { numRuns: 16 },
    );
  });
});
