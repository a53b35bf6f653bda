import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { expectedTensors, type ModelConfig, toHfConfig, validateModelConfig } from '../config.js';
import { fileIoError, ModelError } from '../errors.js';
import { Rng } from '../rng.js';
import {
  buildByteLevelTokenizerConfig,
  buildByteLevelTokenizerJson,
  trainByteLevelBpe,
} from './byte-level-bpe.js';
import { type TensorToWrite, writeSafetensors } from './safetensors.js';

/** Special tokens of the random checkpoint's tokenizer, ids 256–260 (Llama 3 names). */
export const RANDOM_SPECIAL_TOKENS = [
  '<|begin_of_text|>',
  '<|end_of_text|>',
  '<|start_header_id|>',
  '<|end_header_id|>',
  '<|eot_id|>',
] as const;

/** Llama 3's chat template (system/user/assistant headers, `<|eot_id|>` after each turn). */
export const LLAMA3_CHAT_TEMPLATE =
  "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";

/** Text the random tokenizer's merges are learned from (fixed, so vocabularies are reproducible). */
const CORPUS = `The quick brown fox jumps over the lazy dog. A cache holds the keys and values of every
token that came before, so the model never computes them twice. Blocks of sixteen tokens are
allocated from a pool; when the pool runs out, a request is preempted and its blocks come back.
Hello world! How are you today? I am fine, thank you. What is the capital of France? The capital
of France is Paris. Once upon a time there was a little model that wanted to speak. It read many
books and learned many words: the, of, and, to, in, is, that, it, was, for, on, are, with, as, his,
they, be, at, one, have, this, from, or, had, by, not, word, but, what, some, we, can, out, other,
were, all, there, when, up, use, your, how, said, an, each, she, which, do, their, time, if, will,
way, about, many, then, them, write, would, like, so, these, her, long, make, thing, see, him,
two, has, look, more, day, could, go, come, did, number, sound, no, most, people, my, over, know.
def main(): print("hello") # 1234567890 + 3.14159 = 42; x = y * 2 - z / 3
Numbers 0 1 2 3 4 5 6 7 8 9 10 100 1000 2024 2025. Attention is all you need. Tokens, tokens, tokens.
日本語のテキストも少し。中文文本也有一点。🙂 emoji 🚀 and accents: café, naïve, über.`;

/** Options of {@link writeRandomCheckpoint}. */
export interface RandomCheckpointOptions {
  /** Stored weight dtype (default F32). */
  readonly dtype?: 'F32' | 'F16' | 'BF16';
  /** Split the weights over this many safetensors shards with an index (default 1: one file). */
  readonly shards?: number;
}

/** What {@link writeRandomCheckpoint} wrote. */
export interface RandomCheckpoint {
  /** The directory. */
  readonly dir: string;
  /** The config as written (bos/eos filled in from the tokenizer when the input had none). */
  readonly config: ModelConfig;
}

/**
 * Generates the weights of a random checkpoint as float32, tensor by tensor in
 * {@link expectedTensors} order, from one seeded stream. Projection weights are uniform with
 * standard deviation 1/√fan_in, embeddings uniform with unit standard deviation, norm weights
 * 1 ± 0.1 (Gemma's, stored as w of 1 + w: ± 0.1), biases ± 0.1, attention sinks ± 2.
 */
export function* randomTensors(
  config: ModelConfig,
  seed: number,
): Generator<{ name: string; shape: readonly number[]; values: Float32Array }> {
  const rng = new Rng(seed);
  const sqrt3 = Math.sqrt(3);
  for (const t of expectedTensors(config)) {
    const n = t.shape.reduce((a, b) => a * b, 1);
    const values = new Float32Array(n);
    let scale: number;
    let offset = 0;
    if (t.name.endsWith('norm.weight')) {
      scale = 0.1;
      // Gemma's norms multiply by 1 + w: the same 1 ± 0.1.
      offset = config.architecture === 'gemma3' ? 0 : 1;
    } else if (t.name.endsWith('.bias')) scale = 0.1;
    // Attention sinks (one logit per head): ± 2, enough to take a share of every softmax.
    else if (t.name.endsWith('.sinks.weight')) scale = 2;
    else if (t.name === 'model.embed_tokens.weight') scale = sqrt3;
    else scale = sqrt3 / Math.sqrt(t.shape[1]!);
    for (let i = 0; i < n; i++) {
      values[i] = offset + scale * ((rng.nextUint32() / 4294967296) * 2 - 1);
    }
    yield { name: t.name, shape: t.shape, values };
  }
}

/**
 * Writes a complete, loadable Hugging Face checkpoint directory with seeded random weights:
 * `config.json`, `model.safetensors` (or shards plus `model.safetensors.index.json`),
 * `tokenizer.json` (a small byte-level BPE vocabulary learned from a fixed text, Llama 3
 * special tokens at ids 256–260), `tokenizer_config.json` (bos/eos and the Llama 3 chat
 * template) and `generation_config.json`. The same config and seed always produce the same
 * bytes. Its output is noise: for tests, benchmarks and demos.
 *
 * @param dir - created if missing; existing files of the same names are replaced.
 * @throws {@link ModelError} `INVALID_ARGUMENT` when `config.vocabSize < 261` or `shards` is
 *   not a positive integer; `INVALID_CONFIG` for an inconsistent config; `IO` on write failure.
 */
export async function writeRandomCheckpoint(
  dir: string,
  config: ModelConfig,
  seed: number,
  options?: RandomCheckpointOptions,
): Promise<RandomCheckpoint> {
  validateModelConfig(config);
  const base = 256 + RANDOM_SPECIAL_TOKENS.length;
  if (config.vocabSize < base) {
    throw new ModelError(
      'INVALID_ARGUMENT',
      `writeRandomCheckpoint: vocab_size ${config.vocabSize} is below the ${base} ids its byte-level tokenizer needs`,
    );
  }
  const shards = options?.shards ?? 1;
  if (!Number.isInteger(shards) || shards < 1) {
    throw new ModelError(
      'INVALID_ARGUMENT',
      `writeRandomCheckpoint: shards must be a positive integer, got ${shards}`,
    );
  }
  const dtype = options?.dtype ?? 'F32';
  const bos = 256;
  const eos = [257, 260];
  const cfg: ModelConfig = {
    ...config,
    bosTokenId: config.bosTokenId ?? bos,
    eosTokenIds: config.eosTokenIds.length > 0 ? config.eosTokenIds : eos,
  };
  validateModelConfig(cfg);
  try {
    await mkdir(dir, { recursive: true });
  } catch (e) {
    throw new ModelError('IO', `cannot create ${dir}: ${(e as Error).message}`, { cause: e });
  }
  const json = (v: unknown) => `${JSON.stringify(v, null, 2)}\n`;
  await writeJsonFile(join(dir, 'config.json'), json(toHfConfig(cfg)));
  await writeJsonFile(
    join(dir, 'generation_config.json'),
    json({
      bos_token_id: cfg.bosTokenId,
      eos_token_id: [...cfg.eosTokenIds],
      do_sample: true,
      temperature: 0.6,
      top_p: 0.9,
    }),
  );

  const { merges } = trainByteLevelBpe(CORPUS, Math.min(cfg.vocabSize - base, 4096));
  const tokenizer = buildByteLevelTokenizerJson({
    merges,
    specialTokens: RANDOM_SPECIAL_TOKENS,
    bosToken: RANDOM_SPECIAL_TOKENS[0],
    maxVocab: cfg.vocabSize,
  });
  await writeJsonFile(join(dir, 'tokenizer.json'), json(tokenizer));
  await writeJsonFile(
    join(dir, 'tokenizer_config.json'),
    json(
      buildByteLevelTokenizerConfig({
        specialTokens: RANDOM_SPECIAL_TOKENS,
        bosToken: RANDOM_SPECIAL_TOKENS[0],
        eosToken: RANDOM_SPECIAL_TOKENS[4],
        modelMaxLength: cfg.maxPositionEmbeddings,
        chatTemplate: LLAMA3_CHAT_TEMPLATE,
      }),
    ),
  );

  const gen = randomTensors(cfg, seed);
  const specs = expectedTensors(cfg);
  const all: TensorToWrite[] = specs.map((s) => ({
    name: s.name,
    dtype,
    shape: s.shape,
    // Generated lazily in file order, so only one tensor is in memory at a time.
    data: () => {
      const next = gen.next();
      if (next.done || next.value.name !== s.name)
        throw new Error(`random tensor order broke at ${s.name}`);
      return next.value.values;
    },
  }));
  const metadata = { format: 'pt', generator: 'kvasir writeRandomCheckpoint', seed: String(seed) };
  if (shards === 1) {
    await writeSafetensors(join(dir, 'model.safetensors'), all, metadata);
  } else {
    const per = Math.ceil(all.length / shards);
    const weightMap: Record<string, string> = {};
    let totalSize = 0;
    for (let s = 0; s < shards; s++) {
      const part = all.slice(s * per, (s + 1) * per);
      const file = `model-${String(s + 1).padStart(5, '0')}-of-${String(shards).padStart(5, '0')}.safetensors`;
      for (const t of part) {
        weightMap[t.name] = file;
        totalSize += t.shape.reduce((a, b) => a * b, 1) * (dtype === 'F32' ? 4 : 2);
      }
      await writeSafetensors(join(dir, file), part, metadata);
    }
    await writeJsonFile(
      join(dir, 'model.safetensors.index.json'),
      json({ metadata: { total_size: totalSize }, weight_map: weightMap }),
    );
  }
  return { dir, config: cfg };
}

async function writeJsonFile(path: string, text: string): Promise<void> {
  try {
    await writeFile(path, text);
  } catch (e) {
    throw fileIoError('cannot write', path, e);
  }
}
