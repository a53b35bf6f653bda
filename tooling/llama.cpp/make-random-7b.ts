// Writes a seeded random-weight model of Qwen2.5-7B's shape (hidden 3584, 28 layers, 28 heads,
// 4 KV heads, MLP 18944, vocab 152064, untied, QKV biases) in llama.cpp's Q4_K_M mixture: about
// 4.7 GB, past one 4 GiB WebAssembly memory, so the wasm backend must split it over two.
//   tsx make-random-7b.ts <out.gguf> [seed]
//
// No F16 intermediate (15 GB): ggml's reference quantizer in TypeScript does about 0.2 M
// weights/s for Q4_K here, so each tensor is assembled from a pool of valid blocks instead, each
// pool quantized from uniform noise at that tensor kind's scale (the scales of randomTensors:
// 1/sqrt(fan_in) for projections, 1 for the embedding), blocks chosen per position by a seeded
// stream. Types per tensor are llama-quantize's for Q4_K_M (llama-quant.cpp): Q6_K for the
// output, and for attn_v and ffn_down in the layers `use_more_bits` picks; Q4_K for the other
// matrices; F32 for norms and biases. The tokenizer is the random checkpoint's byte-level BPE
// padded to the vocabulary, as convertToGguf writes it.
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expectedTensors, makeModelConfig } from '../../packages/model/src/config.js';
import type { TensorDtype } from '../../packages/model/src/formats/dtype.js';
import { hfToGgufName } from '../../packages/model/src/formats/gguf/tensor-names.js';
import { ggufTokenizerMetadata } from '../../packages/model/src/formats/gguf/tokenizer-metadata.js';
import { type GgufTensorToWrite, writeGguf } from '../../packages/model/src/formats/gguf/writer.js';
import { writeRandomCheckpoint } from '../../packages/model/src/formats/random-checkpoint.js';
import { Rng } from '../../packages/model/src/rng.js';
import { quantizeQ4K, quantizeQ6K } from '../../packages/quantizer/src/ggml/k-quants.js';

const [out, seedArg = '7'] = process.argv.slice(2);
if (!out) {
  console.error('usage: make-random-7b.ts <out.gguf> [seed]');
  process.exit(1);
}
const seed = Number(seedArg);
const config = makeModelConfig({
  architecture: 'qwen2',
  hiddenSize: 3584,
  intermediateSize: 18944,
  numLayers: 28,
  numHeads: 28,
  numKvHeads: 4,
  vocabSize: 152064,
  maxPositionEmbeddings: 32768,
  ropeTheta: 1000000,
  rmsNormEps: 1e-6,
  tieWordEmbeddings: false,
});
const n = config.numLayers;
// llama-quant.cpp's use_more_bits: the first and last eighth of the layers and every third between.
// (C++ integer division: for 28 layers, 0-2, 24-27 and 5, 8, ..., 23)
const moreBits = (i: number) =>
  i < Math.floor(n / 8) || i >= Math.floor((7 * n) / 8) || (i - Math.floor(n / 8)) % 3 === 2;

const POOL_BLOCKS = 4096;
const BLOCK_BYTES = { Q4_K: 144, Q6_K: 210 } as const;
type K = keyof typeof BLOCK_BYTES;
const pools = new Map<string, Uint8Array>();
/** Valid blocks of `type` quantized from uniform noise of standard deviation `std`. */
function pool(type: K, std: number): Uint8Array {
  const key = `${type}@${std}`;
  let p = pools.get(key);
  if (p) return p;
  const rng = new Rng(seed * 1000 + pools.size);
  const src = new Float32Array(POOL_BLOCKS * 256);
  const a = std * Math.sqrt(3);
  for (let i = 0; i < src.length; i++) src[i] = a * ((rng.nextUint32() / 4294967296) * 2 - 1);
  p = new Uint8Array(POOL_BLOCKS * BLOCK_BYTES[type]);
  (type === 'Q4_K' ? quantizeQ4K : quantizeQ6K)(src, 0, p, 0, src.length);
  pools.set(key, p);
  return p;
}

const rng = new Rng(seed);
function blocks(type: K, std: number, count: number): Uint8Array {
  const p = pool(type, std);
  const b = BLOCK_BYTES[type];
  const outBytes = new Uint8Array(count * b);
  for (let i = 0; i < count; i++) {
    const k = rng.nextUint32() % POOL_BLOCKS;
    outBytes.set(p.subarray(k * b, (k + 1) * b), i * b);
  }
  return outBytes;
}
function floats(count: number, offset: number, spread: number): Float32Array {
  const v = new Float32Array(count);
  for (let i = 0; i < count; i++)
    v[i] = offset + spread * ((rng.nextUint32() / 4294967296) * 2 - 1);
  return v;
}

const tensors: GgufTensorToWrite[] = [];
const types: Record<string, number> = {};
for (const t of expectedTensors(config)) {
  const name = hfToGgufName(t.name);
  if (!name) throw new Error(`no GGUF name for ${t.name}`);
  const count = t.shape.reduce((x, y) => x * y, 1);
  let dtype: TensorDtype;
  let data: () => Float32Array | Uint8Array;
  if (t.shape.length === 1) {
    dtype = 'F32';
    const norm = t.name.endsWith('norm.weight');
    data = () => floats(count, norm ? 1 : 0, 0.1);
  } else {
    const layer = /^blk\.(\d+)\./.exec(name);
    const six =
      name === 'output.weight' ||
      (layer !== null &&
        (name.endsWith('attn_v.weight') || name.endsWith('ffn_down.weight')) &&
        moreBits(Number(layer[1])));
    const k: K = six ? 'Q6_K' : 'Q4_K';
    dtype = k;
    const std = name === 'token_embd.weight' ? 1 : 1 / Math.sqrt(t.shape[1] as number);
    data = () => blocks(k, std, count / 256);
  }
  types[dtype] = (types[dtype] ?? 0) + 1;
  tensors.push({ name, dtype, shape: t.shape, data });
}

// The random checkpoint's tokenizer: written by writeRandomCheckpoint for a tiny model of the
// same vocabulary, then read back as convertToGguf reads a checkpoint's tokenizer.
const dir = await mkdtemp(join(tmpdir(), 'kvasir-7b-tok-'));
let tokenizerMd: Record<string, unknown>;
let bos: number;
let eos: readonly number[];
try {
  const tiny = await writeRandomCheckpoint(
    dir,
    makeModelConfig({
      hiddenSize: 32,
      intermediateSize: 32,
      numLayers: 1,
      numHeads: 1,
      vocabSize: config.vocabSize,
    }),
    seed,
  );
  bos = tiny.config.bosTokenId as number;
  eos = tiny.config.eosTokenIds;
  const tj = JSON.parse(await readFile(join(dir, 'tokenizer.json'), 'utf8'));
  const tc = JSON.parse(await readFile(join(dir, 'tokenizer_config.json'), 'utf8'));
  tokenizerMd = ggufTokenizerMetadata(tj, tc, tc.chat_template ?? null, config.vocabSize);
} finally {
  await rm(dir, { recursive: true, force: true });
}

const arch = 'qwen2';
const c = config;
await writeGguf(
  out,
  {
    'general.architecture': arch,
    'general.name': 'kvasir-random-qwen2.5-7b-shape',
    // LLAMA_FTYPE_MOSTLY_Q4_K_M
    'general.file_type': 15,
    [`${arch}.context_length`]: c.maxPositionEmbeddings,
    [`${arch}.embedding_length`]: c.hiddenSize,
    [`${arch}.block_count`]: c.numLayers,
    [`${arch}.feed_forward_length`]: c.intermediateSize,
    [`${arch}.attention.head_count`]: c.numHeads,
    [`${arch}.attention.head_count_kv`]: c.numKvHeads,
    [`${arch}.attention.layer_norm_rms_epsilon`]: { type: 'f32', value: c.rmsNormEps },
    [`${arch}.rope.freq_base`]: { type: 'f32', value: c.ropeTheta },
    ...tokenizerMd,
    'tokenizer.ggml.bos_token_id': bos,
    'tokenizer.ggml.eos_token_id': eos[0],
  },
  tensors,
);
const bytes = tensors.reduce(
  (a, t) =>
    a +
    (t.dtype === 'F32'
      ? 4 * t.shape.reduce((x, y) => x * y, 1)
      : (t.shape.reduce((x, y) => x * y, 1) / 256) * BLOCK_BYTES[t.dtype as K]),
  0,
);
console.log(JSON.stringify({ out, seed, tensors: types, tensorBytes: bytes }));
