import { copyFile, mkdir, mkdtemp, open, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeModelConfig } from '../config.js';
import { loadModel } from '../model/model.js';
import { expectModelError } from '../testing/checkpoint.js';
import { type RewrittenTensor, rewriteGguf } from '../testing/gguf-rewrite.js';
import { seqPlan } from '../testing/model.js';
import { convertToGguf } from './gguf/convert.js';
import { readGgufHeader } from './gguf/header.js';
import { openCheckpoint } from './open-checkpoint.js';
import { writeRandomCheckpoint } from './random-checkpoint.js';
import { writeSafetensors } from './safetensors.js';

// Phi-4-mini's shape at tiny size: 3/4 of each head rotated, LongRoPE, tied embeddings, GQA.
const config = makeModelConfig({
  architecture: 'phi3',
  hiddenSize: 64,
  intermediateSize: 96,
  numLayers: 2,
  numHeads: 4,
  numKvHeads: 2,
  vocabSize: 300,
  tieWordEmbeddings: true,
  rotaryDim: 12,
  maxPositionEmbeddings: 4096,
  ropeScaling: {
    type: 'longrope',
    shortFactors: [1, 1.1, 1.2, 1.5, 2, 3],
    longFactors: [1, 2, 4, 8, 16, 32],
    originalMaxPositionEmbeddings: 256,
  },
  ropeAttentionFactor: 1.25,
});

let root: string;
let file: string;
beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'kvasir-gguf-phi3-'));
  await writeRandomCheckpoint(join(root, 'hf'), config, 21);
  file = join(root, 'phi3.gguf');
  await convertToGguf(join(root, 'hf'), file);
});
afterAll(() => rm(root, { recursive: true, force: true }));

async function header(path: string) {
  const fh = await open(path, 'r');
  try {
    return await readGgufHeader(fh, path);
  } finally {
    await fh.close();
  }
}

/** `src` with its tensors edited, as `root/name`. */
const rewriteTensors = (src: string, name: string, edit: (t: RewrittenTensor[]) => void) =>
  rewriteGguf(src, join(root, name), { tensors: edit });

describe('phi3 GGUF', () => {
  it("is written as llama.cpp's converter writes it: fused attn_qkv and ffn_up, LongRoPE tensors and keys", async () => {
    const h = await header(file);
    const dims = new Map(h.tensors.map((t) => [t.name, [...t.dims]]));
    // ggml's ne: [n_embd, n_embd + 2 n_embd_gqa] and [n_embd, 2 n_ff], as llama.cpp loads them.
    expect(dims.get('blk.0.attn_qkv.weight')).toEqual([64, 64 + 2 * 32]);
    expect(dims.get('blk.1.ffn_up.weight')).toEqual([64, 2 * 96]);
    for (const gone of ['blk.0.attn_q.weight', 'blk.0.attn_k.weight', 'blk.0.ffn_gate.weight'])
      expect(dims.has(gone)).toBe(false);
    expect(dims.get('rope_factors_long.weight')).toEqual([6]);
    expect(dims.get('rope_factors_short.weight')).toEqual([6]);
    expect(h.metadata.get('phi3.rope.dimension_count')).toBe(12);
    expect(h.metadata.get('phi3.rope.scaling.original_context_length')).toBe(256);
    expect(h.metadata.get('phi3.rope.scaling.attn_factor')).toBeCloseTo(1.25, 6);
  });

  it('reads back the HF tensors from the fused rows and the config with its LongRoPE', async () => {
    const hf = await openCheckpoint(join(root, 'hf'));
    const gg = await openCheckpoint(file);
    try {
      expect(gg.config).toEqual({
        ...hf.config,
        rmsNormEps: Math.fround(hf.config.rmsNormEps),
        ropeAttentionFactor: Math.fround(1.25),
        ropeScaling: {
          ...hf.config.ropeScaling,
          ...(config.ropeScaling?.type === 'longrope'
            ? {
                shortFactors: config.ropeScaling.shortFactors.map(Math.fround),
                longFactors: config.ropeScaling.longFactors.map(Math.fround),
              }
            : {}),
        },
      });
      for (const n of [
        'model.layers.1.self_attn.q_proj.weight',
        'model.layers.1.self_attn.k_proj.weight',
        'model.layers.1.self_attn.v_proj.weight',
        'model.layers.0.mlp.gate_proj.weight',
        'model.layers.0.mlp.up_proj.weight',
      ]) {
        expect(gg.tensor(n).shape, n).toEqual(hf.tensor(n).shape);
        expect(await gg.readTensorF32(n), n).toEqual(await hf.readTensorF32(n));
      }
    } finally {
      await hf.close();
      await gg.close();
    }
  });

  it('refuses separate gate and up tensors (ffn_up must stack both), naming the tensor', async () => {
    const bad = await rewriteTensors(file, 'phi3-half-up.gguf', (ts) => {
      const up = ts.find((t) => t.name === 'blk.0.ffn_up.weight');
      if (!up) throw new Error('no ffn_up');
      up.shape = [96, 64];
      up.data = up.data.slice(0, up.data.byteLength / 2);
    });
    await expectModelError(openCheckpoint(bad), 'SHAPE_MISMATCH', 'blk.0.ffn_up.weight');
  });

  it('refuses LongRoPE factors that do not cover the rotary dims, naming the tensor', async () => {
    const bad = await rewriteTensors(file, 'phi3-factors.gguf', (ts) => {
      const f = ts.find((t) => t.name === 'rope_factors_long.weight');
      if (!f) throw new Error('no factors');
      f.shape = [8];
      f.data = new Uint8Array(new Float32Array(8).fill(2).buffer);
    });
    await expectModelError(openCheckpoint(bad), 'INVALID_CONFIG', 'rope_factors_long.weight');
  });

  it("loads transformers' Phi3ForCausalLM layout (qkv_proj, gate_up_proj) as the split projections: the same logits", async () => {
    const split = join(root, 'hf');
    const fused = join(root, 'hf-fused');
    await mkdir(fused, { recursive: true });
    for (const f of ['config.json', 'tokenizer.json', 'tokenizer_config.json'])
      await copyFile(join(split, f), join(fused, f));
    const hf = await openCheckpoint(split);
    const stack = (names: string[]) => async () => {
      const parts = await Promise.all(names.map((n) => hf.readTensorF32(n)));
      const all = new Float32Array(parts.reduce((a, p) => a + p.length, 0));
      let at = 0;
      for (const p of parts) {
        all.set(p, at);
        at += p.length;
      }
      return all;
    };
    const tensors = [];
    const inFused = /\.(self_attn\.[qkv]_proj|mlp\.(gate|up)_proj)\.weight$/;
    for (const [name, t] of hf.tensors) {
      if (!inFused.test(name)) {
        tensors.push({ name, dtype: t.dtype, shape: t.shape, data: await hf.readTensorF32(name) });
      }
    }
    for (let l = 0; l < config.numLayers; l++) {
      const p = `model.layers.${l}.`;
      tensors.push({
        name: `${p}self_attn.qkv_proj.weight`,
        dtype: 'F32' as const,
        shape: [64 + 2 * 32, 64],
        data: await stack(['q', 'k', 'v'].map((x) => `${p}self_attn.${x}_proj.weight`))(),
      });
      tensors.push({
        name: `${p}mlp.gate_up_proj.weight`,
        dtype: 'F32' as const,
        shape: [2 * 96, 64],
        data: await stack([`${p}mlp.gate_proj.weight`, `${p}mlp.up_proj.weight`])(),
      });
    }
    await hf.close();
    await writeSafetensors(join(fused, 'model.safetensors'), tensors);
    const plan = seqPlan([5, 77, 123, 9, 250, 31, 42], 0, [0], 16, 'last');
    const opts = { backend: 'cpu' as const, numBlocks: 2, blockSize: 16, kvFormat: 'f32' as const };
    const a = await loadModel(split, opts);
    const b = await loadModel(fused, opts);
    try {
      expect(Array.from(await b.forward(plan))).toEqual(Array.from(await a.forward(plan)));
    } finally {
      await a.destroy();
      await b.destroy();
    }
  });
});
