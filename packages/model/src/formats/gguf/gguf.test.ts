import { open as fsOpen, mkdtemp, readFile, rm, truncate, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ropeInvFrequencies } from '@kvasir/attention-kernels';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeModelConfig, ropeConfig } from '../../config.js';
import { expectModelError } from '../../testing/checkpoint.js';
import { llamaCppPermute } from '../../testing/llama-cpp.js';
import { ModelTokenizer } from '../../tokenizer/tokenizer.js';
import { decodeToF32, encodeFromF32, f16BitsToF32 } from '../dtype.js';
import { openCheckpoint } from '../open-checkpoint.js';
import { writeRandomCheckpoint } from '../random-checkpoint.js';
import { configFromGguf } from './config-from-metadata.js';
import { convertToGguf } from './convert.js';
import { readGgufHeader } from './header.js';
import { permuteQkRows } from './qk-permute.js';
import { openGgufCheckpoint } from './reader.js';
import { writeGguf } from './writer.js';

const config = makeModelConfig({
  hiddenSize: 64,
  intermediateSize: 96,
  numLayers: 2,
  numHeads: 4,
  numKvHeads: 2,
  vocabSize: 384,
  ropeTheta: 500000,
  ropeScaling: {
    type: 'llama3',
    factor: 8,
    lowFreqFactor: 1,
    highFreqFactor: 4,
    originalMaxPositionEmbeddings: 64,
  },
});

let root: string;
let hfDir: string;
beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'kvasir-gguf-'));
  hfDir = join(root, 'hf');
  await writeRandomCheckpoint(hfDir, config, 5);
  await convertToGguf(hfDir, join(root, 'f32.gguf'));
  await convertToGguf(hfDir, join(root, 'q8.gguf'), { dtype: 'Q8_0' });
});
afterAll(async () => {
  await rm(root, { recursive: true, force: true });
});

describe('GGUF', () => {
  it('reads back the HF tensors exactly from an F32 GGUF (Q/K un-permuted)', async () => {
    const hf = await openCheckpoint(hfDir);
    const gg = await openCheckpoint(join(root, 'f32.gguf'));
    try {
      expect(gg.format).toBe('gguf');
      for (const name of hf.tensors.keys()) {
        expect(gg.tensor(name).shape).toEqual(hf.tensor(name).shape);
        expect(await gg.readTensorF32(name)).toEqual(await hf.readTensorF32(name));
      }
      // Chunked reads of a permuted tensor agree with the whole read.
      const q = 'model.layers.1.self_attn.q_proj.weight';
      const parts: Uint8Array[] = [];
      for await (const c of gg.readChunks(q, { maxChunkBytes: 100 })) parts.push(c);
      expect(Buffer.concat(parts).equals(Buffer.from(await gg.readTensorBytes(q)))).toBe(true);
    } finally {
      await hf.close();
      await gg.close();
    }
  });

  it('stores Q/K rows in llama.cpp order on disk', async () => {
    const hf = await openCheckpoint(hfDir);
    const fh = await fsOpen(join(root, 'f32.gguf'), 'r');
    try {
      const header = await readGgufHeader(fh, 'f32.gguf');
      for (const [g, h, heads] of [
        ['blk.0.attn_q.weight', 'model.layers.0.self_attn.q_proj.weight', config.numHeads],
        ['blk.0.attn_k.weight', 'model.layers.0.self_attn.k_proj.weight', config.numKvHeads],
      ] as const) {
        const e = header.tensors.find((t) => t.name === g)!;
        expect(e.dims).toEqual([...hf.tensor(h).shape].reverse());
        const raw = new Uint8Array(e.byteLength);
        await fh.read(raw, 0, raw.byteLength, e.offset);
        const stored = new Float32Array(raw.buffer);
        const w = await hf.readTensorF32(h);
        expect(stored).toEqual(llamaCppPermute(w, hf.tensor(h).shape[0]!, heads));
        expect(stored).toEqual(permuteQkRows(w, hf.tensor(h).shape[0]!, config.headDim));
        expect(stored).not.toEqual(w);
      }
    } finally {
      await fh.close();
      await hf.close();
    }
  });

  it('carries the config through metadata (Llama 3 RoPE as rope_freqs factors)', async () => {
    const hf = await openCheckpoint(hfDir);
    const gg = await openCheckpoint(join(root, 'f32.gguf'));
    try {
      const { ropeScaling: a, ...restHf } = hf.config;
      const { ropeScaling: b, ...restGg } = gg.config;
      expect(restGg).toMatchObject({ ...restHf, rmsNormEps: Math.fround(restHf.rmsNormEps) });
      expect(a?.type).toBe('llama3');
      expect(b?.type).toBe('freq-factors');
      const fa = ropeInvFrequencies(ropeConfig(hf.config, 1));
      const fb = ropeInvFrequencies(ropeConfig(gg.config, 1));
      for (let i = 0; i < fa.length; i++) expect(Math.abs(fb[i]! / fa[i]! - 1)).toBeLessThan(1e-6);
      expect(gg.metadata.get('general.architecture')).toBe('llama');
    } finally {
      await hf.close();
      await gg.close();
    }
  });

  it('keeps Q8_0 blocks and dequantizes within half a step of each block', async () => {
    const hf = await openCheckpoint(hfDir);
    const gg = await openCheckpoint(join(root, 'q8.gguf'));
    try {
      const name = 'model.layers.0.self_attn.k_proj.weight';
      const info = gg.tensor(name);
      expect(info.dtype).toBe('Q8_0');
      expect(info.byteLength).toBe(((info.shape[0]! * info.shape[1]!) / 32) * 34);
      expect(gg.tensor('model.norm.weight').dtype).toBe('F32');
      const want = await hf.readTensorF32(name);
      const got = await gg.readTensorF32(name);
      for (let b = 0; b < want.length / 32; b++) {
        let amax = 0;
        for (let j = 0; j < 32; j++) amax = Math.max(amax, Math.abs(want[b * 32 + j]!));
        for (let j = 0; j < 32; j++) {
          expect(Math.abs(got[b * 32 + j]! - want[b * 32 + j]!)).toBeLessThanOrEqual(
            (amax / 127) * 0.5 * 1.01 + amax * 1e-3,
          );
        }
      }
    } finally {
      await hf.close();
      await gg.close();
    }
  });

  it('rebuilds the same tokenizer and chat template from GGUF metadata', async () => {
    const a = await ModelTokenizer.load(hfDir);
    const b = await ModelTokenizer.load(join(root, 'f32.gguf'));
    for (const s of [
      'Hello world! The cache of 12345 tokens.',
      '日本語 🙂 café\n\n  x',
      '<|eot_id|>hi',
    ]) {
      expect(b.encode(s)).toEqual(a.encode(s));
      expect(b.decode(a.encode(s))).toBe(a.decode(a.encode(s)));
    }
    const msgs = [{ role: 'user', content: 'Hi' }];
    expect(b.applyChatTemplate(msgs)).toBe(a.applyChatTemplate(msgs));
    expect(b.bosTokenId).toBe(a.bosTokenId);
    expect(b.eosTokenIds).toContain(260);
  });

  it('pads the token list to the embedding rows with unused [PAD<i>] tokens, as llama.cpp requires', async () => {
    // A 1,000-row embedding over the random tokenizer's few hundred tokens.
    const wide = makeModelConfig({ ...config, ropeScaling: null, vocabSize: 1000 });
    const dir = join(root, 'wide-vocab');
    await writeRandomCheckpoint(dir, wide, 6);
    await convertToGguf(dir, join(root, 'wide-vocab.gguf'));
    const tj = JSON.parse(await readFile(join(dir, 'tokenizer.json'), 'utf8')) as {
      model: { vocab: Record<string, number> };
    };
    expect(Object.keys(tj.model.vocab).length).toBeLessThan(wide.vocabSize);
    const gg = await openCheckpoint(join(root, 'wide-vocab.gguf'));
    try {
      const tokens = gg.metadata.get('tokenizer.ggml.tokens') as string[];
      const types = gg.metadata.get('tokenizer.ggml.token_type') as number[];
      expect(tokens.length).toBe(wide.vocabSize);
      expect(types.length).toBe(wide.vocabSize);
      const last = wide.vocabSize - 1;
      expect(tokens[last]).toBe(`[PAD${last}]`);
      expect(types[last]).toBe(5); // llama.cpp's LLAMA_TOKEN_TYPE_UNUSED
    } finally {
      await gg.close();
    }
  });
});

describe('convertToGguf dtype', () => {
  it('refuses a dtype it does not write (Q4_K_M, a llama-quantize mixture) with a typed error naming it, and writes no file', async () => {
    const out = join(root, 'q4km.gguf');
    for (const dtype of ['Q4_K_M', 'q8_0', '', 'toString']) {
      await expectModelError(
        // A JavaScript caller (or a command line) can pass any string.
        convertToGguf(hfDir, out, { dtype: dtype as 'F16' }),
        'INVALID_ARGUMENT',
        `dtype ${JSON.stringify(dtype)}`,
      );
    }
    await expectModelError(
      convertToGguf(hfDir, out, { dtype: 'Q4_K_M' as 'F16' }),
      'INVALID_ARGUMENT',
      'llama-quantize',
    );
    await expect(readFile(out)).rejects.toThrow(/ENOENT/);
  });
});

describe('Q8_0', () => {
  it('quantizes like llama.cpp: scale amax/127 in f16, codes within ±127, bounded error', () => {
    fc.assert(
      fc.property(
        fc.array(fc.float({ min: -100, max: 100, noNaN: true }), { minLength: 32, maxLength: 32 }),
        (arr) => {
          const x = Float32Array.from(arr);
          const q = encodeFromF32('Q8_0', x);
          expect(q.byteLength).toBe(34);
          const view = new DataView(q.buffer);
          let amax = 0;
          for (const v of x) amax = Math.max(amax, Math.abs(v));
          const d = amax / 127;
          const d16 = f16BitsToF32(view.getUint16(0, true));
          // f16 keeps 11 significant bits; below 2^-14 its absolute step is 2^-24.
          const dErr = Math.abs(d16 - d);
          expect(dErr).toBeLessThanOrEqual(d * 2 ** -11 + 2 ** -25);
          const deq = decodeToF32('Q8_0', q);
          for (let j = 0; j < 32; j++) {
            expect(Math.abs(view.getInt8(2 + j))).toBeLessThanOrEqual(127);
            expect(Math.abs(deq[j]! - x[j]!)).toBeLessThanOrEqual(d / 2 + 127 * dErr + d * 1e-6);
          }
        },
      ),
    );
  });
});

describe('GGUF writer and header', () => {
  it('round-trips typed metadata', async () => {
    const p = join(root, 'meta.gguf');
    await writeGguf(
      p,
      {
        'a.u8': { type: 'u8', value: 200 },
        'a.i16': { type: 'i16', value: -3 },
        'a.f64': { type: 'f64', value: 0.1 },
        'a.u64': { type: 'u64', value: 2n ** 60n },
        'a.str': 'héllo',
        'a.bool': true,
        'a.strs': ['x', 'y'],
        'a.f32s': { type: 'array', itemType: 'f32', value: [0.5, 1.5] },
      },
      [{ name: 't', dtype: 'F16', shape: [2, 3], data: new Float32Array([1, 2, 3, 4, 5, 6]) }],
    );
    const fh = await fsOpen(p, 'r');
    try {
      const h = await readGgufHeader(fh, p);
      expect(h.version).toBe(3);
      expect(h.metadata.get('a.u8')).toBe(200);
      expect(h.metadata.get('a.i16')).toBe(-3);
      expect(h.metadata.get('a.f64')).toBe(0.1);
      expect(h.metadata.get('a.u64')).toBe(2n ** 60n);
      expect(h.metadata.get('a.str')).toBe('héllo');
      expect(h.metadata.get('a.bool')).toBe(true);
      expect(h.metadata.get('a.strs')).toEqual(['x', 'y']);
      expect(h.metadata.get('a.f32s')).toEqual([0.5, 1.5]);
      expect(h.tensors[0]).toMatchObject({ name: 't', dtype: 'F16', dims: [3, 2], byteLength: 12 });
      expect(h.tensors[0]!.offset % 32).toBe(0);
    } finally {
      await fh.close();
    }
  });

  async function patched(
    name: string,
    edit: (buf: Buffer) => Buffer | Promise<Buffer>,
  ): Promise<string> {
    const p = join(root, name);
    await writeFile(p, await edit(await readFile(join(root, 'f32.gguf'))));
    return p;
  }

  function tensorTypeOffset(buf: Buffer, name: string): number {
    const at = buf.indexOf(Buffer.from(name, 'utf8'));
    const nd = buf.readUInt32LE(at + name.length);
    return at + name.length + 4 + 8 * nd;
  }

  it('refuses malformed and truncated files, naming the tensor', async () => {
    await expectModelError(
      openGgufCheckpoint(
        await patched('magic.gguf', (b) => {
          b.write('GGUX', 0);
          return b;
        }),
      ),
      'MALFORMED_FILE',
      'magic',
    );
    await expectModelError(
      openGgufCheckpoint(
        await patched('version.gguf', (b) => {
          b.writeUInt32LE(7, 4);
          return b;
        }),
      ),
      'MALFORMED_FILE',
      'version 7',
    );
    const trunc = await patched('trunc.gguf', (b) => b);
    const size = (await readFile(trunc)).length;
    await truncate(trunc, size - 40);
    await expectModelError(openGgufCheckpoint(trunc), 'TRUNCATED_FILE', 'output.weight');
    await truncate(trunc, 100);
    await expectModelError(openGgufCheckpoint(trunc), 'TRUNCATED_FILE');
    await expectModelError(
      openGgufCheckpoint(
        await patched('iq2.gguf', (b) => {
          b.writeUInt32LE(16, tensorTypeOffset(b, 'blk.1.ffn_up.weight'));
          return b;
        }),
      ),
      'UNSUPPORTED_DTYPE',
      'blk.1.ffn_up.weight" is IQ2_XXS (GGML type 16)',
    );
    await expectModelError(
      openGgufCheckpoint(
        await patched('missing.gguf', (b) => {
          const at = b.indexOf(Buffer.from('blk.1.ffn_up.weight', 'utf8'));
          b.write('blk.1.ffn_uq.weight', at);
          return b;
        }),
      ),
      'MISSING_TENSOR',
      'model.layers.1.mlp.up_proj.weight',
    );
    await expectModelError(
      openGgufCheckpoint(
        await patched('arch.gguf', (b) => {
          const at = b.indexOf(Buffer.from('general.architecture', 'utf8'));
          // The value string follows: type u32, length u64, then "llama".
          b.write('gpt2x', at + 'general.architecture'.length + 4 + 8);
          return b;
        }),
      ),
      'UNSUPPORTED_ARCHITECTURE',
      'gpt2x',
    );
  });
});

describe('GGUF variants', () => {
  it('Qwen2 (no Q/K permutation, QKV bias, tied) and F16/BF16 files read back the HF weights', async () => {
    const qdir = join(root, 'qwen');
    await writeRandomCheckpoint(
      qdir,
      makeModelConfig({
        architecture: 'qwen2',
        hiddenSize: 64,
        intermediateSize: 64,
        numLayers: 1,
        numHeads: 4,
        numKvHeads: 1,
        vocabSize: 300,
        tieWordEmbeddings: true,
        ropeTheta: 1e6,
      }),
      8,
      { dtype: 'BF16' },
    );
    for (const dtype of ['F32', 'F16', 'BF16'] as const) {
      const p = join(root, `qwen-${dtype}.gguf`);
      await convertToGguf(qdir, p, { dtype });
      const hf = await openCheckpoint(qdir);
      const gg = await openCheckpoint(p);
      try {
        expect(gg.config).toMatchObject({
          architecture: 'qwen2',
          attentionBias: true,
          attentionOutputBias: false,
          tieWordEmbeddings: true,
          numKvHeads: 1,
          ropeScaling: null,
        });
        expect(gg.tensors.has('lm_head.weight')).toBe(false);
        expect(gg.metadata.get('general.architecture')).toBe('qwen2');
        for (const name of hf.tensors.keys()) {
          // BF16 weights survive F32/BF16 exactly; F16 keeps them within its rounding.
          const a = await hf.readTensorF32(name);
          const b = await gg.readTensorF32(name);
          if (dtype === 'F16' && hf.tensor(name).shape.length === 2) {
            for (let i = 0; i < a.length; i++)
              expect(Math.abs(b[i]! - a[i]!)).toBeLessThanOrEqual(
                Math.abs(a[i]!) * 2 ** -11 + 2 ** -24,
              );
          } else expect(b).toEqual(a);
        }
        expect(gg.tensor('model.layers.0.self_attn.q_proj.bias').dtype).toBe('F32');
      } finally {
        await hf.close();
        await gg.close();
      }
    }
  });

  it('reads a Llama 3.1 8B-style metadata block into the right config', () => {
    const md = new Map<string, unknown>([
      ['general.architecture', 'llama'],
      ['llama.context_length', 131072],
      ['llama.embedding_length', 4096],
      ['llama.block_count', 32],
      ['llama.feed_forward_length', 14336],
      ['llama.attention.head_count', 32],
      ['llama.attention.head_count_kv', 8],
      ['llama.rope.freq_base', 500000],
      ['llama.attention.layer_norm_rms_epsilon', 1e-5],
      ['llama.rope.dimension_count', 128],
      ['tokenizer.ggml.bos_token_id', 128000],
      ['tokenizer.ggml.eos_token_id', 128009],
      ['tokenizer.ggml.eot_token_id', 128009],
    ]);
    const tensors = [
      {
        name: 'token_embd.weight',
        dtype: 'Q8_0' as const,
        dims: [4096, 128256],
        offset: 0,
        byteLength: 0,
      },
      {
        name: 'output.weight',
        dtype: 'Q8_0' as const,
        dims: [4096, 128256],
        offset: 0,
        byteLength: 0,
      },
    ];
    const factors = new Float32Array(64).map((_, i) => (i < 20 ? 1 : 8));
    const c = configFromGguf(md, tensors, 'x.gguf', factors);
    expect(c).toMatchObject({
      architecture: 'llama',
      hiddenSize: 4096,
      numLayers: 32,
      numHeads: 32,
      numKvHeads: 8,
      headDim: 128,
      vocabSize: 128256,
      ropeTheta: 500000,
      maxPositionEmbeddings: 131072,
      tieWordEmbeddings: false,
      bosTokenId: 128000,
      eosTokenIds: [128009],
    });
    expect(c.ropeScaling).toEqual({ type: 'freq-factors', factors: Array.from(factors) });
    expect(() =>
      configFromGguf(new Map([...md, ['llama.rope.dimension_count', 64]]), tensors, 'x.gguf'),
    ).toThrow(/partial RoPE/);
  });
});
