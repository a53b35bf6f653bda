import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openCheckpoint } from '../formats/open-checkpoint.js';
import { generate } from '../model/generate.js';
import { loadModel } from '../model/model.js';
import { ModelTokenizer } from '../tokenizer/tokenizer.js';
import { ARCH_FIXTURES, archRecordPath, QWEN2_FIXTURE, writeArchFixture } from './arch-fixtures.js';
import { klDivergence, type LlamaCppRun } from './ggml-fixture-suite.js';
import { fixtureLoadOptions, seqPlan } from './model.js';

/** What `tooling/ggml-fixtures/make_arch_fixtures.sh` recorded of llama.cpp on one fixture. */
interface ArchRecord {
  readonly sha256: string;
  readonly prompt: string;
  readonly llama_cpp: LlamaCppRun;
}

/**
 * The qwen2 and Mistral-style fixtures on one backend, against llama.cpp on the same bytes:
 * the file this package writes is the one llama.cpp ran (SHA-256), its chat template renders
 * the prompt transformers' jinja2 rendering gave, the GGUF tokenizer gives llama.cpp's prompt
 * tokens, and the model gives llama.cpp's logits after the prompt (max |Δ| within
 * `relativeTolerance` of the largest |logit|; llama.cpp keeps its KV cache in f16) and its 32
 * greedy tokens; and block weights give the distribution of the same weights decoded to f32
 * (KL below `blocksKl`: 1e-6 where activations stay f32, more where kernels quantize them).
 */
export function archFixtureSuite(
  backend: 'cpu' | 'webgpu' | 'wasm',
  relativeTolerance: number,
  blocksKl = 1e-6,
): void {
  describe(`qwen2 and Mistral-style GGUF fixtures against llama.cpp (${backend})`, () => {
    let root: string;
    beforeAll(async () => {
      root = await mkdtemp(join(tmpdir(), 'kvasir-arch-'));
    });
    afterAll(() => rm(root, { recursive: true, force: true }));

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
          const first = await model.forward(seqPlan(prompt, 0, [5, 6, 7], 16, 'last'));
          let maxDiff = 0;
          let scale = 0;
          for (let i = 0; i < first.length; i++) {
            maxDiff = Math.max(maxDiff, Math.abs(first[i]! - run.first_logits[i]!));
            scale = Math.max(scale, Math.abs(run.first_logits[i]!));
          }
          expect(maxDiff / scale).toBeLessThan(relativeTolerance);
          expect(klDivergence(run.first_logits, first)).toBeLessThan(1e-6);
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
