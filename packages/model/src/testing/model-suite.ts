// Test-only: the behavioural suite every backend must pass, run by model-cpu.test.ts and
// model-gpu.test.ts.
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { convertToGguf } from '../formats/gguf/convert.js';
import { openCheckpoint } from '../formats/open-checkpoint.js';
import { generate } from '../model/generate.js';
import { type LoadModelOptions, loadModel, type Model } from '../model/model.js';
import { maxRelDiff } from './compare.js';
import {
  mergePlans,
  releaseTestGpu,
  row,
  seqPlan,
  tempCheckpoint,
  testGpu,
  tinyConfig,
} from './model.js';
import { klDivergence, naiveForward } from './naive-forward.js';

function argmax(x: Float32Array): number {
  let b = 0;
  for (let i = 1; i < x.length; i++) if ((x[i] as number) > (x[b] as number)) b = i;
  return b;
}

export function modelSuite(
  backend: 'cpu' | 'webgpu' | 'wasm',
  extra: Partial<LoadModelOptions> = {},
  label = '',
): void {
  const config = tinyConfig();
  const vocab = config.vocabSize;
  const blockSize = 8;
  let ckpt: Awaited<ReturnType<typeof tempCheckpoint>>;
  const models: Model[] = [];
  const load = async (opts: Partial<LoadModelOptions> = {}, src?: string) => {
    const m = await loadModel(src ?? ckpt.dir, {
      backend,
      numBlocks: 32,
      blockSize,
      kvFormat: 'f32',
      ...(backend === 'webgpu' ? { gpu: await testGpu() } : {}),
      ...extra,
      ...opts,
    });
    models.push(m);
    return m;
  };
  const tokens = Array.from({ length: 21 }, (_, i) => (i * 37 + 11) % vocab);

  beforeAll(async () => {
    ckpt = await tempCheckpoint(config, 42);
  });
  afterAll(async () => {
    for (const m of models) await m.destroy();
    await releaseTestGpu();
    await ckpt?.cleanup();
  });

  describe(`${backend} forward${label}`, () => {
    it('runs on the asked backend', async () => {
      const m = await load();
      expect(m.backend).toBe(backend);
    });

    it('paged incremental decode equals a full recompute without cache at every position', async () => {
      const m = await load();
      const reader = await openCheckpoint(ckpt.dir);
      const full = await naiveForward(reader, tokens);
      await reader.close();
      // Scattered physical blocks: logical order must come from the table, not from ids.
      const table = [5, 2, 9];
      const pre = await m.forward(seqPlan(tokens.slice(0, 3), 0, table, blockSize));
      for (let i = 0; i < 3; i++)
        expect(maxRelDiff(row(pre, i, vocab), row(full, i, vocab)), `pos ${i}`).toBeLessThan(1e-4);
      for (let p = 3; p < tokens.length; p++) {
        const l = await m.forward(seqPlan([tokens[p] as number], p, table, blockSize));
        expect(maxRelDiff(l, row(full, p, vocab)), `pos ${p}`).toBeLessThan(1e-4);
      }
    });

    it('a prefix-cache hit and a chunked prefill give the cold prefill logits', async () => {
      const m = await load();
      const n = 20;
      const cold = await m.forward(seqPlan(tokens.slice(0, n), 0, [0, 1, 2], blockSize, 'last'));
      // Hit: blocks 0 and 1 (16 tokens) are reused; only the tail is computed, into block 3.
      const hit = await m.forward(seqPlan(tokens.slice(16, n), 16, [0, 1, 3], blockSize, 'last'));
      expect(maxRelDiff(hit, cold)).toBeLessThan(1e-5);
      let chunked: Float32Array = new Float32Array(0);
      for (const [a, b] of [
        [0, 7],
        [7, 14],
        [14, 20],
      ] as const) {
        chunked = await m.forward(seqPlan(tokens.slice(a, b), a, [4, 5, 6], blockSize, 'last'));
      }
      expect(maxRelDiff(chunked, cold)).toBeLessThan(1e-5);
    });

    it('a mixed batch of prefill chunks and decodes equals each sequence alone', async () => {
      const m = await load();
      const b = tokens.slice(0, 9);
      await m.forward(seqPlan(b.slice(0, 8), 0, [10, 11], blockSize));
      const plans = [
        seqPlan(tokens.slice(3, 8), 0, [12], blockSize),
        seqPlan([b[8] as number], 8, [10, 11], blockSize),
        seqPlan(tokens.slice(5, 17), 0, [13, 14], blockSize, 'last'),
        seqPlan([7], 0, [15], blockSize),
      ];
      const alone: Float32Array[] = [];
      for (const p of plans) alone.push(await m.forward(p));
      const batch = await m.forward(mergePlans(plans));
      let r = 0;
      for (const a of alone) {
        const rows = a.length / vocab;
        expect(maxRelDiff(batch.subarray(r * vocab, (r + rows) * vocab), a)).toBeLessThan(1e-5);
        r += rows;
      }
      expect(r * vocab).toBe(batch.length);
    });

    it('returns only the asked rows, repeats included, and applies block copies first', async () => {
      const m = await load();
      const plan = seqPlan(tokens.slice(0, 10), 0, [16, 17], blockSize);
      const all = await m.forward(plan);
      const some = await m.forward({ ...plan, logitsIndices: Int32Array.of(9, 2, 9) });
      expect(some.length).toBe(3 * vocab);
      expect(maxRelDiff(row(some, 0, vocab), row(all, 9, vocab))).toBeLessThan(1e-6);
      expect(maxRelDiff(row(some, 1, vocab), row(all, 2, vocab))).toBeLessThan(1e-6);
      // Copy-on-write: block 17 (tokens 8, 9) copied to 18, then decode token 10 on [16, 18].
      const next = seqPlan([tokens[10] as number], 10, [16, 18], blockSize);
      const viaCopy = await m.forward({ ...next, copies: [{ src: 17, dst: 18 }] });
      const direct = await m.forward(seqPlan([tokens[10] as number], 10, [16, 17], blockSize));
      expect(maxRelDiff(viaCopy, direct)).toBeLessThan(1e-6);
    });

    it('runs concurrent forward calls one after another, as if awaited in turn', async () => {
      const m = await load();
      const a = seqPlan(tokens.slice(0, 9), 0, [21, 22], blockSize);
      const b = seqPlan([tokens[9] as number], 9, [21, 22], blockSize);
      const seqA = await m.forward(a);
      const seqB = await m.forward(b);
      const [ca, cb] = await Promise.all([m.forward(a), m.forward(b)]);
      expect(maxRelDiff(ca as Float32Array, seqA)).toBeLessThan(1e-6);
      expect(maxRelDiff(cb as Float32Array, seqB)).toBeLessThan(1e-6);
    });

    it('refuses an inconsistent plan before touching the cache', async () => {
      const m = await load();
      const good = seqPlan(tokens.slice(0, 4), 0, [20], blockSize);
      const before = await m.forward(good);
      const bad = [
        { ...good, tokenIds: Int32Array.of(1, 2, 3, vocab) },
        { ...good, slotMapping: Int32Array.of(0, 1, 2, 32 * blockSize) },
        { ...good, logitsIndices: Int32Array.of(4) },
        { ...good, rows: [{ queryStart: 0, queryLen: 4, contextLen: 20, blockTable: [20] }] },
        { ...good, positions: Int32Array.of(0, 1) },
      ];
      for (const p of bad)
        await expect(m.forward(p)).rejects.toMatchObject({ code: 'INVALID_PLAN' });
      expect(maxRelDiff(await m.forward(good), before)).toBeLessThan(1e-6);
    });

    it('HF safetensors and GGUF encodings of the same weights give the same logits', async () => {
      const gguf = join(ckpt.root, 'model.gguf');
      await convertToGguf(ckpt.dir, gguf);
      const hf = await load();
      const gg = await load({}, gguf);
      const plan = seqPlan(tokens.slice(0, 12), 0, [0, 1], blockSize);
      expect(maxRelDiff(await gg.forward(plan), await hf.forward(plan))).toBeLessThan(1e-6);
    });

    it('int8 weights and an f16 KV cache stay within KL 2e-3 and 1e-4 of f16 weights / f32 KV', async () => {
      const plan = seqPlan(tokens.slice(0, 16), 0, [0, 1], blockSize);
      const ref = await (await load({ weightDtype: 'f16' })).forward(plan);
      const q8 = await (await load({ weightQuant: 'int8' })).forward(plan);
      const kv16 = await (await load({ weightDtype: 'f16', kvFormat: 'f16' })).forward(plan);
      let klW = 0;
      let klKv = 0;
      for (let i = 0; i < 16; i++) {
        klW = Math.max(klW, klDivergence(row(ref, i, vocab), row(q8, i, vocab)));
        klKv = Math.max(klKv, klDivergence(row(ref, i, vocab), row(kv16, i, vocab)));
      }
      expect(klW).toBeLessThan(2e-3);
      expect(klW).toBeGreaterThan(0);
      expect(klKv).toBeLessThan(1e-4);
    });

    it.each([
      ['int8', 2e-3],
      ['fp8-e4m3', 2e-2],
    ] as const)('a %s KV cache stays within KL %d of an f16 one', async (kvFormat, bound) => {
      const plan = seqPlan(tokens.slice(0, 16), 0, [0, 1], blockSize);
      const ref = await (await load({ weightDtype: 'f16', kvFormat: 'f16' })).forward(plan);
      const q = await (await load({ weightDtype: 'f16', kvFormat })).forward(plan);
      let kl = 0;
      for (let i = 0; i < 16; i++)
        kl = Math.max(kl, klDivergence(row(ref, i, vocab), row(q, i, vocab)));
      expect(kl).toBeLessThan(bound);
      expect(kl).toBeGreaterThan(0);
    });

    it('generate (greedy) follows the argmax of a full recompute', async () => {
      const m = await load();
      const prompt = tokens.slice(0, 5);
      const out = await generate(m, prompt, { maxNewTokens: 4, firstBlock: 24 });
      const reader = await openCheckpoint(ckpt.dir);
      const seq = [...prompt];
      for (let i = 0; i < 4; i++) {
        const l = await naiveForward(reader, seq);
        seq.push(argmax(row(l, seq.length - 1, vocab)));
      }
      await reader.close();
      expect(out).toEqual(seq.slice(5));
    });
  });
}
