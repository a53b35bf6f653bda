import { mkdtemp, open, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeModelConfig } from '../../config.js';
import { sliceWeightBytes } from '../../execution/weights.js';
import { modelLimits } from '../../model/device-limits.js';
import { loadModel } from '../../model/model.js';
import { expectModelError } from '../../testing/checkpoint.js';
import { rewriteGguf } from '../../testing/gguf-rewrite.js';
import { seqPlan } from '../../testing/model.js';
import { openCheckpoint } from '../open-checkpoint.js';
import { writeRandomCheckpoint } from '../random-checkpoint.js';
import { convertToGguf } from './convert.js';
import { readGgufHeader } from './header.js';

const config = makeModelConfig({
  architecture: 'mistral',
  hiddenSize: 64,
  intermediateSize: 96,
  numLayers: 2,
  numHeads: 4,
  numKvHeads: 2,
  vocabSize: 300,
});

let root: string;
let llamaFile: string;
beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'kvasir-gguf-arch-'));
  await writeRandomCheckpoint(join(root, 'hf'), config, 11);
  llamaFile = join(root, 'llama.gguf');
  await convertToGguf(join(root, 'hf'), llamaFile);
});
afterAll(() => rm(root, { recursive: true, force: true }));

/** `src` with its metadata edited, as `root/name`. */
const rewrite = (src: string, name: string, edit: (md: Map<string, unknown>) => void) =>
  rewriteGguf(src, join(root, name), { metadata: edit });

/** The file's `llama.*` keys as another architecture's. */
const asArch = (arch: string) => (md: Map<string, unknown>) => {
  for (const [k, v] of [...md]) {
    if (k.startsWith('llama.')) {
      md.delete(k);
      md.set(`${arch}.${k.slice('llama.'.length)}`, v);
    }
  }
  md.set('general.architecture', arch);
};

describe('GGUF architectures', () => {
  it('mistral3 (Ministral 3): Q/K un-permuted as for llama, the same logits as the llama file', async () => {
    const file = await rewrite(llamaFile, 'mistral3.gguf', asArch('mistral3'));
    const hf = await openCheckpoint(join(root, 'hf'));
    const gg = await openCheckpoint(file);
    try {
      expect(gg.config.architecture).toBe('mistral');
      expect(gg.config.numKvHeads).toBe(2);
      for (const name of hf.tensors.keys())
        expect(await gg.readTensorF32(name)).toEqual(await hf.readTensorF32(name));
    } finally {
      await hf.close();
      await gg.close();
    }
    const opts = { backend: 'cpu' as const, numBlocks: 2, blockSize: 16 };
    const a = await loadModel(llamaFile, opts);
    const b = await loadModel(file, opts);
    const plan = seqPlan([1, 5, 9, 200, 7], 0, [0], 16, 'last');
    expect(await b.forward(plan)).toEqual(await a.forward(plan));
    await a.destroy();
    await b.destroy();
  });

  it('keeps a declared sliding window (0 meaning none), as the HF reader keeps Mistral’s', async () => {
    const sw = await rewrite(llamaFile, 'sw.gguf', (md) =>
      md.set('llama.attention.sliding_window', 4096),
    );
    const none = await rewrite(llamaFile, 'sw0.gguf', (md) =>
      md.set('llama.attention.sliding_window', 0),
    );
    for (const [file, want] of [
      [sw, 4096],
      [none, null],
      [llamaFile, null],
    ] as const) {
      const r = await openCheckpoint(file);
      expect(r.config.slidingWindow).toBe(want);
      await r.close();
    }
  });

  it.each([
    [{ 'mistral3.expert_count': 8 }, 'mixture of experts'],
    [{ 'mistral3.rope.scaling.type': 'longrope' }, 'RoPE scaling "longrope"'],
    // Plain YaRN: llama.cpp scales cos/sin by 0.1·ln(4) + 1.
    [
      { 'mistral3.rope.scaling.type': 'yarn', 'mistral3.rope.scaling.factor': 4 },
      'YaRN with an attention factor of 1.1386',
    ],
    [
      {
        'mistral3.rope.scaling.type': 'yarn',
        'mistral3.rope.scaling.factor': 4,
        'mistral3.rope.scaling.yarn_log_multiplier': 1,
        'mistral3.rope.scaling.yarn_ext_factor': 0.5,
      },
      'yarn_ext_factor 0.5',
    ],
  ] as const)('refuses %o, naming it (UNSUPPORTED_ARCHITECTURE)', async (keys, what) => {
    const file = await rewrite(llamaFile, `bad-${what.length}.gguf`, (md) => {
      asArch('mistral3')(md);
      for (const [k, v] of Object.entries(keys)) md.set(k, v);
    });
    await expectModelError(openCheckpoint(file), 'UNSUPPORTED_ARCHITECTURE', what);
  });

  it('YaRN (Ministral 3: yarn_log_multiplier 1) as freq factors; temperature scaling caps the context', async () => {
    const file = await rewrite(llamaFile, 'yarn.gguf', (md) => {
      asArch('mistral3')(md);
      md.set('mistral3.context_length', 4096);
      md.set('mistral3.rope.freq_base', 1e6);
      md.set('mistral3.rope.scaling.type', 'yarn');
      md.set('mistral3.rope.scaling.factor', 16);
      md.set('mistral3.rope.scaling.original_context_length', 256);
      md.set('mistral3.rope.scaling.yarn_log_multiplier', 1);
      md.set('mistral3.attention.temperature_scale', 0.1);
    });
    const r = await openCheckpoint(file);
    try {
      const s = r.config.ropeScaling;
      expect(s?.type).toBe('freq-factors');
      const f = s?.type === 'freq-factors' ? s.factors : [];
      // Head dim 16, θ 1e6, 256 original positions: ggml's correction dims are
      // ⌊16·ln(256 / (32·2π)) / (2·ln 1e6)⌋ = 0 and ⌈16·ln(256 / 2π) / (2·ln 1e6)⌉ = 3, so
      // pair 0 keeps its frequency, pairs 3.. turn 16 times slower, pairs 1 and 2 blend.
      const blend = (mix: number) => 1 / ((1 - mix) / 16 + mix);
      expect(f).toHaveLength(8);
      expect(f[0]).toBe(1);
      expect(f[1]).toBeCloseTo(blend(2 / 3), 12);
      expect(f[2]).toBeCloseTo(blend(1 / 3), 12);
      for (let i = 3; i < 8; i++) expect(f[i]).toBeCloseTo(16, 12);
      expect(r.config.maxPositionEmbeddings).toBe(256);
    } finally {
      await r.close();
    }
  });

  it('refuses architectures it does not run, listing the ones it does', async () => {
    const file = await rewrite(llamaFile, 'mistral4.gguf', asArch('mistral4'));
    await expectModelError(
      openCheckpoint(file),
      'UNSUPPORTED_ARCHITECTURE',
      'supported: llama, qwen2, mistral3, qwen3, smollm3, gemma3, qwen3moe, gpt-oss, phi3',
    );
  });

  it('a gemma3 file without its Q/K and sandwich norms is refused naming the first missing one', async () => {
    const file = await rewrite(llamaFile, 'gemma3.gguf', asArch('gemma3'));
    await expectModelError(openCheckpoint(file), 'MISSING_TENSOR', 'q_norm');
  });

  it('qwen3moe: experts split from their 3-D tensors; a bad expert count is refused, naming the key or tensor', async () => {
    const moeConfig = makeModelConfig({
      architecture: 'qwen3moe',
      hiddenSize: 64,
      intermediateSize: 96,
      numLayers: 2,
      numHeads: 4,
      numKvHeads: 2,
      vocabSize: 300,
      moe: { numExperts: 4, numExpertsPerToken: 2, expertIntermediateSize: 32, normTopkProb: true },
    });
    await writeRandomCheckpoint(join(root, 'hf-moe'), moeConfig, 12);
    const file = join(root, 'qwen3moe.gguf');
    await convertToGguf(join(root, 'hf-moe'), file);
    const fh = await open(file, 'r');
    const header = await readGgufHeader(fh, file);
    await fh.close();
    const exps = header.tensors.find((t) => t.name === 'blk.1.ffn_down_exps.weight');
    // ggml's ne: [n_ff, n_embd, n_expert], as llama.cpp's loader wants it.
    expect(exps?.dims).toEqual([32, 64, 4]);
    expect(header.metadata.get('qwen3moe.expert_used_count')).toBe(2);
    const hf = await openCheckpoint(join(root, 'hf-moe'));
    const gg = await openCheckpoint(file);
    try {
      expect(gg.config).toEqual({ ...hf.config, rmsNormEps: Math.fround(hf.config.rmsNormEps) });
      // The memory plan counts every expert: the file's tensor bytes, all of them.
      const fileBytes = header.tensors.reduce((a, t) => a + t.byteLength, 0);
      expect(gg.totalBytes).toBe(fileBytes);
      expect(sliceWeightBytes(gg, {})).toBe(fileBytes);
      expect((await modelLimits(gg, { backend: 'cpu' })).devices[0]?.weightBytes).toBe(fileBytes);
      const name = 'model.layers.1.mlp.experts.3.down_proj.weight';
      expect(gg.tensor(name).shape).toEqual([64, 32]);
      expect(await gg.readTensorF32(name)).toEqual(await hf.readTensorF32(name));
    } finally {
      await hf.close();
      await gg.close();
    }
    const tooMany = await rewrite(file, 'qwen3moe-used.gguf', (md) =>
      md.set('qwen3moe.expert_used_count', 5),
    );
    await expectModelError(openCheckpoint(tooMany), 'INVALID_CONFIG', 'expert_used_count');
    const fewer = await rewrite(file, 'qwen3moe-count.gguf', (md) =>
      md.set('qwen3moe.expert_count', 3),
    );
    await expectModelError(openCheckpoint(fewer), 'SHAPE_MISMATCH', 'ffn_gate_exps');
  });

  it("gpt-oss: sinks, biased experts split from their 2-D and 3-D tensors, MXFP4 experts, YaRN's cos/sin factor as the attention scale; no window is refused", async () => {
    const c = makeModelConfig({
      architecture: 'gpt-oss',
      hiddenSize: 64,
      intermediateSize: 32,
      numLayers: 3,
      numHeads: 4,
      numKvHeads: 2,
      headDim: 16,
      vocabSize: 300,
      slidingWindow: 8,
      moe: {
        numExperts: 4,
        numExpertsPerToken: 2,
        expertIntermediateSize: 32,
        normTopkProb: true,
        expertBias: true,
        activation: 'swiglu-oai',
      },
    });
    expect(c.slidingWindowLayers).toEqual([0, 2]);
    await writeRandomCheckpoint(join(root, 'hf-oss'), c, 5);
    const file = join(root, 'gpt-oss.gguf');
    const exps = ['gate', 'up', 'down'].flatMap((p) =>
      [0, 1, 2].map((l) => [`blk.${l}.ffn_${p}_exps.weight`, 'MXFP4'] as const),
    );
    await convertToGguf(join(root, 'hf-oss'), file, { tensorDtypes: Object.fromEntries(exps) });
    const fh = await open(file, 'r');
    const header = await readGgufHeader(fh, file);
    await fh.close();
    const dims = (n: string) => header.tensors.find((t) => t.name === n);
    expect(dims('blk.1.ffn_down_exps.bias')?.dims).toEqual([64, 4]);
    expect(dims('blk.1.ffn_down_exps.weight')?.dtype).toBe('MXFP4');
    expect(dims('blk.0.attn_sinks.weight')?.dims).toEqual([4]);
    expect(dims('blk.0.post_attention_norm.weight')?.dims).toEqual([64]);
    expect(header.metadata.get('gpt-oss.attention.sliding_window')).toBe(8);
    const hf = await openCheckpoint(join(root, 'hf-oss'));
    const gg = await openCheckpoint(file);
    try {
      expect(gg.config).toEqual({ ...hf.config, rmsNormEps: Math.fround(hf.config.rmsNormEps) });
      const bias = 'model.layers.2.mlp.experts.3.up_proj.bias';
      expect(await gg.readTensorF32(bias)).toEqual(await hf.readTensorF32(bias));
      const sinks = 'model.layers.1.self_attn.sinks.weight';
      expect(await gg.readTensorF32(sinks)).toEqual(await hf.readTensorF32(sinks));
    } finally {
      await hf.close();
      await gg.close();
    }
    const yarn = await rewrite(file, 'gpt-oss-yarn.gguf', (md) => {
      md.set('gpt-oss.rope.scaling.type', 'yarn');
      md.set('gpt-oss.rope.scaling.factor', 32);
      md.set('gpt-oss.rope.scaling.original_context_length', 4096);
    });
    const y = await openCheckpoint(yarn);
    try {
      // llama.cpp multiplies cos and sin by 0.1·ln(32) + 1: q·k by its square.
      const m = 0.1 * Math.log(32) + 1;
      expect(y.config.attentionScale).toBeCloseTo((m * m) / 4, 12);
      expect(y.config.ropeScaling?.type).toBe('freq-factors');
    } finally {
      await y.close();
    }
    const noWindow = await rewrite(file, 'gpt-oss-nowindow.gguf', (md) =>
      md.delete('gpt-oss.attention.sliding_window'),
    );
    await expectModelError(openCheckpoint(noWindow), 'INVALID_CONFIG', 'sliding_window');
  });

  it('a qwen3 file without its Q/K norm tensors is refused naming the first missing one', async () => {
    const file = await rewrite(llamaFile, 'qwen3.gguf', asArch('qwen3'));
    await expectModelError(openCheckpoint(file), 'MISSING_TENSOR', 'q_norm');
  });
});
