import { readFileSync, statSync } from 'node:fs';
import { basename, join } from 'node:path';
import {
  loadModel,
  type Model,
  ModelTokenizer,
  openCheckpoint,
  parameterCount,
  parseHfConfig,
} from '@kvasir/model';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ggufPath, hfDir, modelCard, modelInfo } from '../src/index.js';

const readJson = (path: string) => JSON.parse(readFileSync(path, 'utf8'));
const config = readJson(join(hfDir, 'config.json'));
/** A held-out snippet and PyTorch's loss on it, written by tooling/train/package_model.mjs. */
const snippet: { step: number; ids: number[]; pytorchMeanNll: number } = readJson(
  join(import.meta.dirname, 'heldout-snippet.json'),
);

const BLOCK = 16;

async function load(path: string): Promise<Model> {
  return loadModel(path, {
    backend: 'cpu',
    kvFormat: 'f32',
    weightDtype: 'f32',
    numBlocks: Math.ceil(snippet.ids.length / BLOCK),
    blockSize: BLOCK,
  });
}

/** Logits at every position of the snippet (one prefill). */
async function snippetLogits(model: Model): Promise<Float32Array> {
  const n = snippet.ids.length;
  const logits = await model.forward({
    tokenIds: Int32Array.from(snippet.ids),
    positions: Int32Array.from({ length: n }, (_, i) => i),
    slotMapping: Int32Array.from({ length: n }, (_, i) => i),
    rows: [
      {
        queryStart: 0,
        queryLen: n,
        contextLen: n,
        blockTable: Array.from({ length: Math.ceil(n / BLOCK) }, (_, i) => i),
      },
    ],
    logitsIndices: Int32Array.from({ length: n }, (_, i) => i),
  });
  return Float32Array.from(logits);
}

/** Mean negative log-likelihood (nats) of each next token of the snippet. */
function meanNll(logits: Float32Array, vocab: number): number {
  let nll = 0;
  for (let i = 0; i + 1 < snippet.ids.length; i++) {
    const row = logits.subarray(i * vocab, (i + 1) * vocab);
    let max = Number.NEGATIVE_INFINITY;
    for (const x of row) max = Math.max(max, x);
    let sum = 0;
    for (const x of row) sum += Math.exp(x - max);
    nll -= row[snippet.ids[i + 1]!]! - max - Math.log(sum);
  }
  return nll / (snippet.ids.length - 1);
}

describe('the package entry', () => {
  it('points at the shipped files', () => {
    for (const f of [
      'config.json',
      'model.safetensors',
      'tokenizer.json',
      'tokenizer_config.json',
    ]) {
      expect(statSync(join(hfDir, f)).isFile(), f).toBe(true);
    }
    expect(basename(ggufPath)).toBe('kvasir-mini.gguf');
    expect(statSync(ggufPath).size).toBeGreaterThan(2 * modelInfo.parameters);
    expect(readFileSync(modelCard, 'utf8')).toMatch(/non-commercial research use/i);
  });

  it('describes the weights in hf/ (architecture, parameters, training step)', () => {
    const parsed = parseHfConfig(config);
    expect(parameterCount(parsed)).toBe(modelInfo.parameters);
    expect(modelInfo.architecture).toEqual({
      hiddenSize: parsed.hiddenSize,
      numLayers: parsed.numLayers,
      numHeads: parsed.numHeads,
      numKvHeads: parsed.numKvHeads,
      intermediateSize: parsed.intermediateSize,
      vocabSize: parsed.vocabSize,
      contextLength: parsed.maxPositionEmbeddings,
    });
    const training = readJson(join(hfDir, 'training.json'));
    expect(training.step).toBe(modelInfo.step);
    expect(snippet.step).toBe(modelInfo.step);
    expect(modelInfo.step).toBeLessThanOrEqual(modelInfo.totalSteps);
  });

  it('names the model and its licence in the GGUF metadata', async () => {
    const gguf = await openCheckpoint(ggufPath);
    try {
      expect(gguf.metadata.get('general.name')).toBe(modelInfo.name);
      expect(gguf.metadata.get('general.license')).toMatch(/non-commercial/);
    } finally {
      await gguf.close();
    }
  });

  it('says in the model card which step the weights are from', () => {
    const card = readFileSync(modelCard, 'utf8');
    expect(card).toContain(
      `step ${modelInfo.step.toLocaleString('en-US')} of ${modelInfo.totalSteps.toLocaleString('en-US')}`,
    );
  });
});

describe('the weights, loaded by @kvasir/model', () => {
  let hf: Model;
  let hfLogits: Float32Array;
  beforeAll(async () => {
    hf = await load(hfDir);
    hfLogits = await snippetLogits(hf);
  });
  afterAll(async () => {
    await hf?.destroy();
  });

  it("give PyTorch's loss on held-out text, far below chance", () => {
    const nll = meanNll(hfLogits, modelInfo.architecture.vocabSize);
    expect(Math.abs(nll - snippet.pytorchMeanNll) / snippet.pytorchMeanNll).toBeLessThan(1e-4);
    // A model that learned nothing scores ln(4096) = 8.3 nats per token.
    expect(Math.exp(nll)).toBeLessThan(modelInfo.architecture.vocabSize / 8);
  });

  it('are the same model in the GGUF file: tokenizer, chat prompt and logits', async () => {
    const eos = [config.eos_token_id].flat() as number[];
    const [fromHf, fromGguf] = await Promise.all([
      ModelTokenizer.load(hfDir, eos),
      ModelTokenizer.load(ggufPath, eos),
    ]);
    const chat = [{ role: 'user' as const, content: 'What does "lantern" mean?' }];
    expect(fromGguf.encodeChat(chat)).toEqual(fromHf.encodeChat(chat));
    expect(fromGguf.decode(snippet.ids)).toBe(fromHf.decode(snippet.ids));
    expect([...fromGguf.eosTokenIds].sort()).toEqual([...fromHf.eosTokenIds].sort());

    const gguf = await load(ggufPath);
    try {
      const logits = await snippetLogits(gguf);
      let maxDiff = 0;
      for (let i = 0; i < logits.length; i++) {
        maxDiff = Math.max(maxDiff, Math.abs(logits[i]! - hfLogits[i]!));
      }
      expect(maxDiff).toBeLessThan(1e-3);
    } finally {
      await gguf.destroy();
    }
  });
});
