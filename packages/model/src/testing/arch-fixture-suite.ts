import { createHash } from 'node:crypto';
import { mkdtemp, open, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readGgufHeader } from '../formats/gguf/header.js';
import { openCheckpoint } from '../formats/open-checkpoint.js';
import { generate } from '../model/generate.js';
import { loadModel } from '../model/model.js';
import { ModelTokenizer } from '../tokenizer/tokenizer.js';
import {
  ARCH_FIXTURES,
  type ArchFixture,
  archRecordPath,
  type QuantizedType,
  QWEN2_FIXTURE,
  quantizedTensorTypes,
  writeArchFixture,
} from './arch-fixtures.js';
import { klDivergence, type LlamaCppRun } from './ggml-fixture-suite.js';
import { fixtureLoadOptions, seqPlan } from './model.js';

/** What `tooling/ggml-fixtures/make_arch_fixtures.sh` recorded of llama.cpp on one fixture. */
interface ArchRecord {
  readonly sha256: string;
  readonly prompt: string;
  readonly llama_cpp: LlamaCppRun;
  /**
   * With experts shipped in blocks (gpt-oss's MXFP4): llama.cpp on the file's weights decoded
   * to f32 (its run on the blocks quantizes activations to 8 bits).
   */
  readonly dequantized_f32?: LlamaCppRun;
  /** Per llama-quantize type: each tensor's [GGML type, SHA-256 of its bytes] and two runs. */
  readonly quantized?: Readonly<
    Record<
      QuantizedType,
      {
        readonly tensors: Readonly<Record<string, readonly [string, string]>>;
        readonly llama_cpp: { quantized: LlamaCppRun; dequantized_f32: LlamaCppRun };
      }
    >
  >;
}

/** SHA-256 of each tensor's bytes in a GGUF file, by GGUF name. */
async function tensorHashes(path: string): Promise<Record<string, readonly [string, string]>> {
  const fh = await open(path, 'r');
  try {
    const out: Record<string, readonly [string, string]> = {};
    for (const t of (await readGgufHeader(fh, path)).tensors) {
      const b = new Uint8Array(t.byteLength);
      await fh.read(b, 0, b.byteLength, t.offset);
      out[t.name] = [t.dtype, createHash('sha256').update(b).digest('hex')];
    }
    return out;
  } finally {
    await fh.close();
  }
}

/** Max |a - b| over the largest |b|. */
function relativeMaxDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let maxDiff = 0;
  let scale = 0;
  for (let i = 0; i < b.length; i++) {
    maxDiff = Math.max(maxDiff, Math.abs(a[i]! - b[i]!));
    scale = Math.max(scale, Math.abs(b[i]!));
  }
  return maxDiff / scale;
}

const QUANTIZED_CASES = ARCH_FIXTURES.flatMap((fx: ArchFixture) =>
  (fx.quantized ?? []).map((q) => [`${fx.name} ${q}`, fx, q] as const),
);

/**
 * The architecture fixtures (qwen2, Mistral-style, mistral3, qwen3, smollm3, gemma3) on one backend,
 * against llama.cpp on the same bytes:
 * the file this package writes is the one llama.cpp ran (SHA-256), its chat template renders
 * the prompt transformers' jinja2 rendering gave, the GGUF tokenizer gives llama.cpp's prompt
 * tokens, and the model gives llama.cpp's logits after the prompt (max |Δ| within
 * `relativeTolerance` of the largest |logit|; llama.cpp keeps its KV cache in f16) and its 32
 * greedy tokens; and block weights give the distribution of the same weights decoded to f32
 * (KL below `blocksKl`: 1e-6 where activations stay f32, more where kernels quantize them;
 * max |Δ| within `blocksRelativeTolerance` of the largest logit).
 * The family fixtures' llama-quantize files (F16, Q8_0, Q4_K_M) are rebuilt tensor for tensor
 * and give llama.cpp's logits on their weights decoded to f32 and its greedy tokens.
 */
export function archFixtureSuite(
  backend: 'cpu' | 'webgpu' | 'wasm',
  relativeTolerance: number,
  blocksKl = 1e-6,
  blocksRelativeTolerance = relativeTolerance,
): void {
  describe(`architecture GGUF fixtures against llama.cpp (${backend})`, () => {
    let root: string;
    beforeAll(async () => {
      root = await mkdtemp(join(tmpdir(), 'kvasir-arch-'));
    });
    afterAll(() => rm(root, { recursive: true, force: true }));

    const withSinks = ARCH_FIXTURES.filter((fx) => fx.config.attentionSinks);
    if (withSinks.length > 0) {
      it.each(withSinks.map((fx) => [fx.name, fx] as const))(
        "%s: without its attention sinks the logits leave llama.cpp's by far more than the tolerance",
        async (_, fx) => {
          const record = JSON.parse(await readFile(archRecordPath(fx.name), 'utf8')) as ArchRecord;
          const path = join(root, `${fx.name}-nosinks.gguf`);
          await writeArchFixture(fx, path);
          const reader = await openCheckpoint(path, {
            configOverride: (c) => ({ ...c, attentionSinks: false }),
          });
          const model = await loadModel(reader, await fixtureLoadOptions(backend, 8));
          try {
            const prompt = record.llama_cpp.prompt_tokens;
            const first = await model.forward(seqPlan(prompt, 0, [5, 6, 7, 4], 16, 'last'));
            const exact = record.dequantized_f32 ?? record.llama_cpp;
            expect(relativeMaxDiff(first, exact.first_logits)).toBeGreaterThan(
              20 * relativeTolerance,
            );
          } finally {
            await model.destroy();
            await reader.close();
          }
        },
      );
    }

    it.each(ARCH_FIXTURES.map((fx) => [fx.name, fx] as const))(
      '%s: llama.cpp prompt tokens, logits and 32 greedy tokens',
      async (_, fx) => {
        const record = JSON.parse(await readFile(archRecordPath(fx.name), 'utf8')) as ArchRecord;
        const path = join(root, `${fx.name}.gguf`);
        const { config, sha256 } = await writeArchFixture(fx, path);
        // The bytes llama.cpp ran: a change to the converter or writer shows here first
        // (then rerun tooling/ggml-fixtures/make_arch_fixtures.sh).
        expect(sha256, `${fx.name}: not the file llama.cpp ran`).toBe(record.sha256);

        const reader = await openCheckpoint(path);
        expect(reader.config).toMatchObject({
          architecture: fx.runsAs,
          attentionBias: config.attentionBias,
          ropeTheta: config.ropeTheta,
          tieWordEmbeddings: config.tieWordEmbeddings,
          vocabSize: config.vocabSize,
        });
        await reader.close();

        const tok = await ModelTokenizer.load(path);
        expect(tok.applyChatTemplate(fx.messages)).toBe(record.prompt);
        const run = record.llama_cpp;
        const prompt = tok.encodeChat(fx.messages);
        expect(prompt).toEqual(run.prompt_tokens);

        const model = await loadModel(path, await fixtureLoadOptions(backend, 8));
        try {
          const first = await model.forward(seqPlan(prompt, 0, [5, 6, 7, 4], 16, 'last'));
          // Experts in blocks: llama.cpp's arithmetic on the same weights decoded to f32, and
          // its run on the blocks (activations quantized to 8 bits) within the quantized
          // fixtures' KL.
          // (A backend whose kernels quantize activations for block weights, as wasm's do,
          // gets the block tolerances.)
          const exact = record.dequantized_f32 ?? run;
          const blocks = record.dequantized_f32 !== undefined;
          expect(relativeMaxDiff(first, exact.first_logits)).toBeLessThan(
            blocks ? blocksRelativeTolerance : relativeTolerance,
          );
          expect(klDivergence(exact.first_logits, first)).toBeLessThan(blocks ? blocksKl : 1e-6);
          if (record.dequantized_f32) {
            expect(klDivergence(run.first_logits, first)).toBeLessThan(4e-4);
            expect(record.dequantized_f32.tokens).toEqual(run.tokens);
          }
          expect(await generate(model, prompt, { maxNewTokens: run.tokens.length })).toEqual(
            run.tokens,
          );
        } finally {
          await model.destroy();
        }
      },
    );

    it.each(QUANTIZED_CASES)(
      "%s: llama-quantize's tensor bytes, llama.cpp's logits of those weights and its greedy tokens",
      async (_, fx, q) => {
        const record = JSON.parse(await readFile(archRecordPath(fx.name), 'utf8')) as ArchRecord;
        const rq = record.quantized?.[q];
        if (!rq) throw new Error(`${fx.name}: no ${q} record (rerun make_arch_fixtures.sh)`);
        const path = join(root, `${fx.name}-${q}.gguf`);
        await writeArchFixture(fx, path, undefined, await quantizedTensorTypes(fx, q));
        // @kvasir/quantizer with llama-quantize's per-tensor types gives its bytes exactly: the
        // weights below are the ones llama.cpp ran.
        expect(await tensorHashes(path)).toEqual(rq.tensors);

        const tok = await ModelTokenizer.load(path);
        const run = rq.llama_cpp.quantized;
        const prompt = tok.encodeChat(fx.messages);
        expect(prompt).toEqual(run.prompt_tokens);
        const model = await loadModel(path, await fixtureLoadOptions(backend, 8));
        try {
          const first = await model.forward(seqPlan(prompt, 0, [5, 6, 7, 4], 16, 'last'));
          // llama.cpp on the same weights decoded to f32 (its KV cache in f16).
          const f32 = rq.llama_cpp.dequantized_f32.first_logits;
          const onBlocks = q !== 'F16';
          expect(relativeMaxDiff(first, f32)).toBeLessThan(
            onBlocks ? blocksRelativeTolerance : relativeTolerance,
          );
          expect(klDivergence(f32, first)).toBeLessThan(onBlocks ? blocksKl : 1e-6);
          // llama.cpp's run on the blocks quantizes its activations (Q8_K for the k-quants):
          // 1.4e-4 (qwen3, 2 layers) and 1.5e-4 (smollm3, 4 layers) KL away in Q4_K_M.
          expect(klDivergence(run.first_logits, first)).toBeLessThan(4e-4);
          expect(await generate(model, prompt, { maxNewTokens: run.tokens.length })).toEqual(
            run.tokens,
          );
        } finally {
          await model.destroy();
        }
      },
    );

    it.each(['Q8_0', 'Q4_0'] as const)(
      'tiny-qwen2 in %s blocks: QKV bias on block weights, the distribution of the blocks decoded to f32',
      async (dtype) => {
        const path = join(root, `qwen2-${dtype}.gguf`);
        await writeArchFixture(QWEN2_FIXTURE, path, dtype);
        const tok = await ModelTokenizer.load(path);
        const prompt = tok.encodeChat(QWEN2_FIXTURE.messages);
        const common = await fixtureLoadOptions(backend, 4);
        const blocks = await loadModel(path, common);
        const f32 = await loadModel(path, { ...common, weightDtype: 'f32' });
        try {
          const plan = seqPlan(prompt, 0, [0, 1, 2], 16, 'last');
          expect(klDivergence(await f32.forward(plan), await blocks.forward(plan))).toBeLessThan(
            blocksKl,
          );
        } finally {
          await blocks.destroy();
          await f32.destroy();
        }
      },
    );
  });
}
