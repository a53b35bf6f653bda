// Test-only: Qwen3's Q/K norm, SmolLM3's NoPE layers and Qwen3 MoE's experts on one backend, against the independent
// dense forward (naive-forward.ts) and through KV compression's key shifts and the GGUF round
// trip. Run by model-family-*.test.ts for each backend.
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ModelConfig } from '../config.js';
import type { ForwardPlan } from '../execution/forward-plan.js';
import type { KvFormatName } from '../execution/kv-cache.js';
import { convertToGguf } from '../formats/gguf/convert.js';
import { openCheckpoint } from '../formats/open-checkpoint.js';
import { type LoadModelOptions, loadModel, type Model } from '../model/model.js';
import { maxRelDiff } from './compare.js';
import { releaseTestGpu, row, seqPlan, tempCheckpoint, testGpu, tinyConfig } from './model.js';
import { naiveForward } from './naive-forward.js';
import {
  expectSameRun,
  runShardScenario,
  SCENARIO_BLOCK_SIZE,
  SCENARIO_BLOCKS,
} from './shard-scenario.js';

/** Tiny configs of the families whose attention differs from Llama's. */
export const FAMILY_CONFIGS: readonly (readonly [string, ModelConfig])[] = [
  ['qwen3 (Q/K norm)', tinyConfig({ architecture: 'qwen3' })],
  // Four layers: layer 3 is NoPE.
  ['smollm3 (NoPE every 4th layer)', tinyConfig({ architecture: 'smollm3', numLayers: 4 })],
  // Two sliding-window layers (window 6, RoPE base 10,000) and a global one (θ = 1e6, linear
  // scaling 4): the 19 positions below run three windows long.
  [
    'gemma3 (sliding-window layers, sandwich norms, GELU, soft cap)',
    tinyConfig({
      architecture: 'gemma3',
      numLayers: 3,
      slidingWindow: 6,
      slidingWindowLayers: [0, 1],
      ropeScaling: { type: 'linear', factor: 4 },
      finalLogitSoftcap: 30,
    }),
  ],
  // Phi-4-mini's shape: 48 of 64 dims rotated, LongRoPE's long factors (the 2,048-position
  // context is past the original 512) and its attention factor on the rotated dims.
  [
    'phi3 (partial rotary, LongRoPE)',
    tinyConfig({
      architecture: 'phi3',
      rotaryDim: 48,
      maxPositionEmbeddings: 2048,
      ropeScaling: {
        type: 'longrope',
        shortFactors: Array.from({ length: 24 }, (_, i) => 1 + i / 24),
        longFactors: Array.from({ length: 24 }, (_, i) => 1 + (3 * i) ** 1.5 / 4),
        originalMaxPositionEmbeddings: 512,
      },
      ropeAttentionFactor: 1.19,
    }),
  ],
  [
    'qwen3moe (8 experts, top 3)',
    tinyConfig({
      architecture: 'qwen3moe',
      moe: { numExperts: 8, numExpertsPerToken: 3, expertIntermediateSize: 64, normTopkProb: true },
    }),
  ],
  [
    'qwen3moe (4 experts, top 2, weights not renormalized)',
    tinyConfig({
      architecture: 'qwen3moe',
      moe: {
        numExperts: 4,
        numExpertsPerToken: 2,
        expertIntermediateSize: 96,
        normTopkProb: false,
      },
    }),
  ],
];

/** Decode tolerance after a key shift per KV format (one more rounding of the keys). */
const SHIFT_TOL: Partial<Record<KvFormatName, number>> = { f32: 1e-5, f16: 1e-3, int8: 1.5e-2 };

export function familySuite(
  backend: 'cpu' | 'webgpu' | 'wasm',
  extra: Partial<LoadModelOptions> = {},
): void {
  describe.each(FAMILY_CONFIGS)(`${backend}: %s`, (_, config) => {
    const vocab = config.vocabSize;
    const bs = 8;
    const tokens = Array.from({ length: 40 }, (_, i) => (i * 29 + 7) % vocab);
    let ckpt: Awaited<ReturnType<typeof tempCheckpoint>>;
    const models: Model[] = [];
    const load = async (opts: Partial<LoadModelOptions> = {}, src?: string) => {
      const m = await loadModel(src ?? ckpt.dir, {
        backend,
        numBlocks: 24,
        blockSize: bs,
        kvFormat: 'f32',
        ...(backend === 'webgpu' ? { gpu: await testGpu() } : {}),
        ...extra,
        ...opts,
      });
      models.push(m);
      return m;
    };
    beforeAll(async () => {
      ckpt = await tempCheckpoint(config, 33);
    });
    afterAll(async () => {
      for (const m of models) await m.destroy();
      await releaseTestGpu();
      await ckpt?.cleanup();
    });

    it('paged prefill and decode equal a dense recompute at every position', async () => {
      const m = await load();
      const reader = await openCheckpoint(ckpt.dir);
      const n = 19;
      const full = await naiveForward(reader, tokens.slice(0, n));
      await reader.close();
      const table = [7, 2, 11];
      const pre = await m.forward(seqPlan(tokens.slice(0, 4), 0, table, bs));
      for (let i = 0; i < 4; i++)
        expect(maxRelDiff(row(pre, i, vocab), row(full, i, vocab)), `pos ${i}`).toBeLessThan(1e-4);
      for (let p = 4; p < n; p++) {
        const l = await m.forward(seqPlan([tokens[p] as number], p, table, bs));
        expect(maxRelDiff(l, row(full, p, vocab)), `pos ${p}`).toBeLessThan(1e-4);
      }
    });

    // Sliding-window layers must not read the blocks their window left: the precondition of
    // freeing them. With every layer windowed, blocks before the window are poisoned with NaN; the
    // next decode gives the unpoisoned logits bit for bit (a kernel that read them and masked
    // them would get NaN: 0 · NaN).
    if (config.slidingWindowLayers !== undefined) {
      it('a decode never reads the blocks before the window of every layer (poisoned with NaN)', async () => {
        const windowed = await tempCheckpoint(
          {
            ...config,
            slidingWindowLayers: Array.from({ length: config.numLayers }, (_, l) => l),
          },
          33,
        );
        const clean = await load({}, windowed.dir);
        const poisoned = await load({}, windowed.dir);
        const table = [7, 2, 11, 5];
        const n = 26; // window 6: position 26 reads 21..26, logical blocks 2 and 3 (bs 8)
        for (const m of [clean, poisoned])
          await m.forward(seqPlan(tokens.slice(0, n), 0, table, bs));
        const blockBytes = (await poisoned.readBlocks([7])).byteLength;
        const nan = new Uint8Array(new Float32Array(blockBytes / 4).fill(Number.NaN).buffer);
        const decode = seqPlan([tokens[n] as number], n, table, bs);
        // Control: poisoning a block inside the window reaches the logits.
        const inside = await poisoned.readBlocks([11]);
        await poisoned.writeBlocks([11], nan);
        expect((await poisoned.forward(decode)).some(Number.isNaN)).toBe(true);
        await poisoned.writeBlocks([11], inside);
        const both = new Uint8Array(2 * blockBytes);
        both.set(nan, 0);
        both.set(nan, blockBytes);
        await poisoned.writeBlocks([7, 2], both);
        expect(Array.from(await poisoned.forward(decode))).toEqual(
          Array.from(await clean.forward(decode)),
        );
        await windowed.cleanup();
      });
    }

    it('the GGUF conversion (llama.cpp layout) gives the safetensors logits', async () => {
      const gguf = join(ckpt.root, 'model.gguf');
      if (config.moe && !config.moe.normTopkProb) {
        // llama.cpp's qwen3moe always renormalizes: such a model has no GGUF form.
        await expect(
          convertToGguf(ckpt.dir, gguf, { withoutTokenizer: true }),
        ).rejects.toMatchObject({
          code: 'INVALID_ARGUMENT',
          message: expect.stringContaining('norm_topk_prob'),
        });
        return;
      }
      await convertToGguf(ckpt.dir, gguf, { withoutTokenizer: true });
      const reader = await openCheckpoint(gguf);
      expect(reader.config.architecture).toBe(config.architecture);
      expect(reader.config.qkNorm ?? false).toBe(config.qkNorm ?? false);
      expect(reader.config.noRopeLayers ?? []).toEqual(config.noRopeLayers ?? []);
      expect(reader.config.slidingWindowLayers ?? []).toEqual(config.slidingWindowLayers ?? []);
      expect(reader.config.slidingWindow).toBe(config.slidingWindow);
      expect(reader.config.finalLogitSoftcap).toBe(config.finalLogitSoftcap);
      expect(reader.config.moe).toEqual(config.moe);
      expect(reader.config.rotaryDim).toBe(config.rotaryDim);
      expect(reader.config.ropeAttentionFactor ?? 1).toBeCloseTo(
        config.ropeAttentionFactor ?? 1,
        6,
      );
      if (config.ropeScaling?.type === 'longrope') {
        expect(reader.config.ropeScaling).toMatchObject({
          type: 'longrope',
          originalMaxPositionEmbeddings: config.ropeScaling.originalMaxPositionEmbeddings,
        });
      }
      await reader.close();
      const plan = seqPlan(tokens.slice(0, 20), 0, [0, 1, 2], bs, 'last');
      const a = await (await load()).forward(plan);
      const b = await (await load({}, gguf)).forward(plan);
      expect(maxRelDiff(b, a)).toBeLessThan(1e-5);
    });

    it('split by layer over two devices, gives the unsplit logits and KV bytes bit for bit', async () => {
      // The second device's first layer is the model's layer 1: a NoPE layer (3) or a Q/K norm
      // found by its local index would be the wrong one.
      const run = async (opts: Partial<LoadModelOptions>) => {
        const m = await loadModel(ckpt.dir, {
          numBlocks: SCENARIO_BLOCKS,
          blockSize: SCENARIO_BLOCK_SIZE,
          kvFormat: 'f32',
          ...extra,
          ...opts,
        });
        try {
          return await runShardScenario(m);
        } finally {
          await m.destroy();
        }
      };
      const gpu = backend === 'webgpu' ? { gpu: await testGpu() } : {};
      const threads = backend === 'wasm' ? { threads: 2 } : {};
      const want = await run({ backend, ...gpu });
      const got = await run({
        devices: [
          { backend, ...gpu, ...threads, layers: { firstLayer: 0, numLayers: 1 } },
          { backend, ...gpu, ...threads },
        ],
      });
      expectSameRun(got, want, 0);
    });

    it.each(['f32', 'f16', 'int8'] as const)(
      'key shift (KV %s): keys written at p + d and shifted by -d decode as keys written at p',
      async (kvFormat) => {
        const shifted = await load({ kvFormat });
        const direct = await load({ kvFormat });
        const n = 20;
        const d = 37;
        const table = [5, 9, 2];
        const at = (plan: ForwardPlan, first: number): ForwardPlan => ({
          ...plan,
          positions: plan.positions.map((_, i) => first + i),
        });
        await shifted.forward(at(seqPlan(tokens.slice(0, n), 0, table, bs), d));
        await direct.forward(seqPlan(tokens.slice(0, n), 0, table, bs));
        const next = seqPlan([tokens[n] as number], n, table, bs);
        const want = await direct.forward(next);
        const got = await shifted.forward({
          ...next,
          keyShifts: table.map((block) => ({ block, delta: -d })),
        });
        // Q/K norm comes before RoPE, so rotating the cached keys is still exact; a NoPE
        // layer's keys never moved and must not be rotated.
        expect(maxRelDiff(got, want)).toBeLessThan(SHIFT_TOL[kvFormat] as number);
      },
    );
  });
}
