import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { loadModel, type Model } from '../model/model.js';
import { fixtureLoadOptions, seqPlan } from './model.js';

/** The llama.cpp-quantized model fixtures of `tooling/ggml-fixtures/models`. */
export const GGML_MODEL_FIXTURES = ['Q4_K_M', 'Q5_K_M', 'Q6_K', 'Q4_0'] as const;

/** What `tooling/ggml-fixtures/make_model_fixtures.sh` recorded of llama.cpp on one file. */
export interface LlamaCppRun {
  readonly prompt_tokens: number[];
  readonly tokens: number[];
  readonly margins: number[];
  readonly first_logits: number[];
}

/** One fixture: the GGUF's path, its tensors' types and llama.cpp's two runs. */
export interface GgmlModelFixture {
  readonly path: string;
  readonly tensors: { name: string; type: string; shape: number[] }[];
  readonly llamaCpp: { quantized: LlamaCppRun; dequantized_f32: LlamaCppRun };
}

// Read from the tooling folder rather than copied: 1.6 MB of GGUF in two places would drift.
const dir = new URL('../../../../tooling/ggml-fixtures/models/', import.meta.url);

/** Loads fixture `ftype`'s JSON and the path of its GGUF. */
export async function ggmlModelFixture(ftype: string): Promise<GgmlModelFixture> {
  const json = JSON.parse(await readFile(new URL(`tiny-llama-${ftype}.json`, dir), 'utf8'));
  return {
    path: fileURLToPath(new URL(`tiny-llama-${ftype}.gguf`, dir)),
    tensors: json.tensors,
    llamaCpp: json.llama_cpp,
  };
}

/** KL(softmax(p) ‖ softmax(q)) of two logit rows, in double precision. */
export function klDivergence(p: ArrayLike<number>, q: ArrayLike<number>): number {
  const logSoftmax = (x: ArrayLike<number>) => {
    let max = -Infinity;
    for (let i = 0; i < x.length; i++) max = Math.max(max, x[i] as number);
    let s = 0;
    for (let i = 0; i < x.length; i++) s += Math.exp((x[i] as number) - max);
    const lse = max + Math.log(s);
    return Array.from({ length: x.length }, (_, i) => (x[i] as number) - lse);
  };
  const lp = logSoftmax(p);
  const lq = logSoftmax(q);
  let kl = 0;
  for (let i = 0; i < lp.length; i++)
    kl += Math.exp(lp[i] as number) * ((lp[i] as number) - (lq[i] as number));
  return kl;
}

/** Greedy tokens and the logits after the prompt, one decode step at a time. */
async function greedy(m: Model, prompt: number[], steps: number) {
  const tokens: number[] = [];
  let first: Float32Array | undefined;
  let seq = [...prompt];
  let start = 0;
  const blocks = [0, 1, 2, 3];
  for (let s = 0; s < steps; s++) {
    const logits = await m.forward(seqPlan(seq.slice(start), start, blocks, 16, 'last'));
    first ??= logits;
    let best = 0;
    for (let i = 1; i < logits.length; i++) if (logits[i]! > logits[best]!) best = i;
    tokens.push(best);
    start = seq.length;
    seq = [...seq, best];
  }
  return { tokens, first: first as Float32Array };
}

/**
 * The llama.cpp k-quant fixtures on one backend: the file's blocks, multiplied as they are,
 * give the next-token distribution of the same weights dequantized to f32 at load (KL below
 * `kl.blocks`: 1e-6 where activations stay f32; kernels that quantize them to 8 bits per block of
 * 32, as llama.cpp's do, land where llama.cpp's own run does, ~1e-4 from f32), llama.cpp's
 * logits on those f32 weights within `logitsTolerance` (max |Δ|; llama.cpp keeps its KV cache in
 * f16, Kvasir here in f32: about 1e-3 apart, KL ~5e-8 below `kl.llamaF32`), and llama.cpp's
 * greedy tokens on the quantized file over its 32 recorded steps (each fixture's prompt was
 * chosen so that every step's margin exceeds llama.cpp's activation-quantization noise).
 */
export function ggmlFixtureSuite(
  backend: 'cpu' | 'webgpu' | 'wasm',
  fixtures: readonly string[],
  logitsTolerance: number,
  kl: { readonly blocks: number; readonly llamaF32: number } = { blocks: 1e-6, llamaF32: 1e-7 },
): void {
  const blocksKl = kl.blocks;
  describe(`llama.cpp k-quant fixtures (${backend})`, () => {
    it.each(fixtures.map((f) => [f]))(
      `%s: blocks = dequantized f32 (KL < ${blocksKl}), llama.cpp greedy tokens and logits`,
      async (ftype) => {
        const fx = await ggmlModelFixture(ftype);
        const common = await fixtureLoadOptions(backend, 4);
        const blocks = await loadModel(fx.path, common);
        const f32 = await loadModel(fx.path, { ...common, weightDtype: 'f32' });
        const run = fx.llamaCpp.quantized;
        const q = await greedy(blocks, run.prompt_tokens, run.tokens.length);
        const d = await greedy(f32, run.prompt_tokens, 1);
        expect(klDivergence(d.first, q.first)).toBeLessThan(blocksKl);
        expect(q.tokens).toEqual(run.tokens);
        const ref = fx.llamaCpp.dequantized_f32.first_logits;
        let maxDiff = 0;
        for (let i = 0; i < ref.length; i++)
          maxDiff = Math.max(maxDiff, Math.abs(q.first[i]! - ref[i]!));
        expect(maxDiff).toBeLessThan(logitsTolerance);
        expect(klDivergence(ref, q.first)).toBeLessThan(kl.llamaF32);
        // llama.cpp's own run on the blocks quantizes the activations too: ~1e-4 KL away.
        expect(klDivergence(run.first_logits, q.first)).toBeLessThan(1e-4);
        await blocks.destroy();
        await f32.destroy();
      },
    );
  });
}
