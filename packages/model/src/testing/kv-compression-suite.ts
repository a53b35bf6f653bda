// Test-only: token-level KV compression's plan fields (per-block attention mass, RoPE key shifts) on one backend,
// run by model-kv-compression.test.ts for each backend that implements them.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ModelConfig } from '../config.js';
import type { ForwardPlan } from '../execution/forward-plan.js';
import type { KvFormatName } from '../execution/kv-cache.js';
import { type LoadModelOptions, loadModel, type Model } from '../model/model.js';
import { maxRelDiff } from './compare.js';
import {
  mergePlans,
  releaseTestGpu,
  seqPlan,
  tempCheckpoint,
  testGpu,
  tinyConfig,
} from './model.js';

/** Loads models of one config on `backend` and destroys them after the file. */
export function modelLoader(
  backend: 'cpu' | 'webgpu' | 'wasm',
  config: ModelConfig,
  seed: number,
  extra: Partial<LoadModelOptions> = {},
) {
  let ckpt: Awaited<ReturnType<typeof tempCheckpoint>> | undefined;
  const models: Model[] = [];
  beforeAll(async () => {
    ckpt = await tempCheckpoint(config, seed);
  });
  afterAll(async () => {
    for (const m of models) await m.destroy();
    await ckpt?.cleanup();
  });
  return async (opts: Partial<LoadModelOptions> = {}, on = backend): Promise<Model> => {
    const m = await loadModel((ckpt as { dir: string }).dir, {
      backend: on,
      numBlocks: 24,
      blockSize: 8,
      kvFormat: 'f32',
      ...(on === 'webgpu' ? { gpu: await testGpu() } : {}),
      ...extra,
      ...opts,
    });
    models.push(m);
    return m;
  };
}

/** A plan whose tokens sit at `positions[0] + i` (seqPlan's slots, any start position). */
function atPositions(plan: ForwardPlan, first: number): ForwardPlan {
  return { ...plan, positions: plan.positions.map((_, i) => first + i) };
}

/**
 * Relative tolerance of decode logits after a key shift, per KV format: the shift adds one
 * rounding of the keys. Measured on the CPU backend: 7e-8 (f32), 1.6e-4 (f16), 3.7e-3 (int8),
 * against 0.2 without the shift.
 */
const SHIFT_TOL: Partial<Record<KvFormatName, number>> = { f32: 1e-5, f16: 1e-3, int8: 1.5e-2 };

/**
 * Every backend that implements KV compression's plan fields passes this: `attentionMass` sums to
 * layers × heads × massQueries per row, ignores rows that do not ask and leaves the logits as
 * they are; `keyShifts` moves cached keys so that decoding continues as if they had been written
 * at the shifted positions.
 */
export function kvCompressionSuite(
  backend: 'cpu' | 'webgpu' | 'wasm',
  extra: Partial<LoadModelOptions> = {},
  label = '',
): void {
  const config = tinyConfig();
  const oneLayer = tinyConfig({ numLayers: 1 });
  const bs = 8;
  const vocab = config.vocabSize;
  const tokens = Array.from({ length: 40 }, (_, i) => (i * 29 + 7) % vocab);

  describe(`${backend} attention mass and key shifts${label}`, () => {
    // Registered first, so it runs after the loaders have destroyed their models.
    afterAll(releaseTestGpu);
    const load = modelLoader(backend, config, 21, extra);
    const load1 = modelLoader(backend, oneLayer, 22, extra);

    if (backend !== 'cpu') {
      it("attention mass equals the cpu backend's", async () => {
        const m = await load();
        const ref = await load({}, 'cpu');
        const plan = mergePlans([
          seqPlan(tokens.slice(0, 27), 0, [0, 1, 2, 3], bs, 'last'),
          seqPlan(tokens.slice(30, 39), 0, [4, 5], bs, 'last'),
        ]);
        const run = async (model: Model) => {
          const a = new Float32Array(4);
          const b = new Float32Array(2);
          const rows = plan.rows as ForwardPlan['rows'][number][];
          await model.forward({
            ...plan,
            rows: [
              { ...(rows[0] as ForwardPlan['rows'][number]), attentionMass: a, massQueries: 16 },
              { ...(rows[1] as ForwardPlan['rows'][number]), attentionMass: b, massQueries: 1 },
            ],
          });
          return Float32Array.of(...a, ...b);
        };
        const want = await run(ref);
        const got = await run(m);
        // Sums of up to 2 layers × 2 heads × 16 queries of probabilities: f32 against f64.
        expect(maxRelDiff(got, want)).toBeLessThan(1e-4);
        // 2 layers × 2 heads × 16 queries.
        expect(want.subarray(0, 4).reduce((x, y) => x + y, 0)).toBeCloseTo(4 * 16, 2);
      });
    }
    it('attention mass: per logical block, sums to layers x heads x massQueries, logits unchanged', async () => {
      const m = await load();
      const heads = config.numHeads * config.numLayers;
      // Row 0: a 19-token prompt (3 blocks, the last partial) counting its last 4 queries;
      // row 1: a decode over 12 cached tokens; row 2: no mass.
      await m.forward(seqPlan(tokens.slice(0, 11), 0, [7, 3], bs));
      const plain = mergePlans([
        seqPlan(tokens.slice(0, 19), 0, [0, 1, 2], bs, 'last'),
        seqPlan([tokens[11] as number], 11, [7, 3], bs),
        seqPlan(tokens.slice(20, 25), 0, [4], bs, 'last'),
      ]);
      const before = await m.forward(plain);
      const mass0 = new Float32Array(5).fill(-1);
      const mass1 = new Float32Array(2).fill(-1);
      const rows = plain.rows;
      const withMass: ForwardPlan = {
        ...plain,
        rows: [
          { ...(rows[0] as ForwardPlan['rows'][number]), attentionMass: mass0, massQueries: 4 },
          { ...(rows[1] as ForwardPlan['rows'][number]), attentionMass: mass1 },
          rows[2] as ForwardPlan['rows'][number],
        ],
      };
      const after = await m.forward(withMass);
      expect(maxRelDiff(after, before)).toBeLessThan(1e-6);
      const sum = (x: Float32Array) => x.reduce((a, b) => a + b, 0);
      expect(sum(mass0.subarray(0, 3))).toBeCloseTo(heads * 4, 3);
      expect([...mass0.subarray(3)]).toEqual([-1, -1]); // only ceil(19 / 8) entries are written
      expect(sum(mass1)).toBeCloseTo(heads, 4);
      for (const x of [...mass0.subarray(0, 3), ...mass1]) expect(x).toBeGreaterThan(0);
      // Overwritten, not accumulated: the same step again gives the same mass.
      const again = mass0.slice();
      await m.forward(withMass);
      expect(maxRelDiff(mass0, again)).toBeLessThan(1e-6);
      // Default massQueries is the whole query.
      const all = new Float32Array(3);
      const r0 = rows[0] as ForwardPlan['rows'][number];
      await m.forward({ ...plain, rows: [{ ...r0, attentionMass: all }, ...rows.slice(1)] });
      expect(sum(all)).toBeCloseTo(heads * 19, 2);
    });

    it.each(['f32', 'f16', 'int8'] as const)(
      'key shift (KV %s): a cache written at positions p + d, shifted by -d, decodes as one written at p',
      async (kvFormat) => {
        const shifted = await load({ kvFormat });
        const direct = await load({ kvFormat });
        const n = 20;
        const d = 37;
        const table = [5, 9, 2];
        // Relative positions are what attention sees: the prompt at d.. computes the same K/V
        // up to RoPE, so after the shift the caches hold the same keys.
        await shifted.forward(atPositions(seqPlan(tokens.slice(0, n), 0, table, bs), d));
        await direct.forward(seqPlan(tokens.slice(0, n), 0, table, bs));
        const next = seqPlan([tokens[n] as number], n, table, bs);
        const unshifted = await shifted.forward(next);
        const want = await direct.forward(next);
        const got = await shifted.forward({
          ...next,
          keyShifts: table.map((block) => ({ block, delta: -d })),
        });
        const tol = SHIFT_TOL[kvFormat] as number;
        expect(maxRelDiff(got, want)).toBeLessThan(tol);
        // Without the shift the decode differs: the test can tell.
        expect(maxRelDiff(unshifted, want)).toBeGreaterThan(10 * tol);
        // Shifting forward again undoes it.
        const back = await shifted.forward({
          ...next,
          keyShifts: table.map((block) => ({ block, delta: d })),
        });
        expect(maxRelDiff(back, unshifted)).toBeLessThan(tol);
      },
    );

    it('key shift after dropping a middle block: equals a cache written without it (one layer)', async () => {
      // With one layer, K/V depend only on the token and its position, so a cache that drops
      // block 1 and shifts block 2 back by 8 must equal one written at those positions directly.
      const a = await load1();
      const b = await load1();
      await a.forward(seqPlan(tokens.slice(0, 24), 0, [10, 11, 12], bs));
      await b.forward(seqPlan(tokens.slice(0, 8), 0, [10, 12], bs));
      await b.forward(atPositions(seqPlan(tokens.slice(16, 24), 8, [10, 12], bs), 8));
      const next = seqPlan([tokens[24] as number], 16, [10, 12, 13], bs);
      // The same step also asks for mass: it must see the shifted keys.
      const withMass = (m: Float32Array): ForwardPlan => ({
        ...next,
        rows: [{ ...(next.rows[0] as ForwardPlan['rows'][number]), attentionMass: m }],
      });
      const wantMass = new Float32Array(3);
      const gotMass = new Float32Array(3);
      const want = await b.forward(withMass(wantMass));
      const got = await a.forward({ ...withMass(gotMass), keyShifts: [{ block: 12, delta: -8 }] });
      expect(maxRelDiff(got, want)).toBeLessThan(2e-5);
      expect(maxRelDiff(gotMass, wantMass)).toBeLessThan(1e-4);
    });

    it('key shifts run after the block copies, on the listed blocks only', async () => {
      const m = await load();
      const ref = await load();
      const ref2 = await load();
      const prompt = seqPlan(tokens.slice(0, 8), 0, [3], bs);
      await m.forward(atPositions(prompt, 8));
      await ref2.forward(atPositions(prompt, 8));
      await ref.forward(seqPlan(tokens.slice(0, 8), 0, [4], bs));
      // Copy block 3 to 4, then shift the copy: 4 holds keys at 0..7, 3 keeps them at 8..15.
      const next = seqPlan([tokens[8] as number], 8, [4, 6], bs);
      const got = await m.forward({
        ...next,
        copies: [{ src: 3, dst: 4 }],
        keyShifts: [{ block: 4, delta: -8 }],
      });
      expect(maxRelDiff(got, await ref.forward(next))).toBeLessThan(2e-5);
      const old = seqPlan([tokens[8] as number], 8, [3, 7], bs);
      expect(maxRelDiff(await m.forward(old), await ref2.forward(old))).toBeLessThan(1e-6);
    });
  });
}
