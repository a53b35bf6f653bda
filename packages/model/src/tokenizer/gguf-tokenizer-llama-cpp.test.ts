import { readFile } from 'node:fs/promises';
import { describe, expect, it } from 'vitest';
import { ModelError } from '../errors.js';
import { ggufMetadata, vocabPath } from '../testing/arch-fixtures.js';
import { ModelTokenizer } from './tokenizer.js';

/** What `tooling/ggml-fixtures/make_tokenizer_fixtures.py` recorded of llama.cpp's tokenizer. */
interface TokenizerRecord {
  readonly tokenizer_model: string;
  readonly pre: string | null;
  readonly texts: string[];
  readonly llama_cpp: { add_special: number[]; no_add_special: number[]; detokenized: string }[];
}

// Real vocabularies (llama.cpp's models/ggml-vocab-*.gguf, cut to what the texts reach) and
// llama.cpp's own test texts plus chat-formatted prompts, tokenized by llama.cpp.
const VOCABS = [
  ['llama-spm', 'llama', 'default'],
  ['qwen2', 'gpt2', 'qwen2'],
  ['llama-bpe', 'gpt2', 'llama-bpe'],
  ['gpt-2', 'gpt2', 'gpt-2'],
  ['gpt-2-default', 'gpt2', 'default'],
  ['gpt-2-tekken', 'gpt2', 'tekken'],
  ['gpt-2-smollm', 'gpt2', 'smollm'],
  ['gpt-2-gpt4o', 'gpt2', 'gpt-4o'],
  ['llama-spm-eos', 'llama', 'default'],
] as const;

async function load(name: string) {
  const record = JSON.parse(
    await readFile(vocabPath(name).replace(/\.gguf$/, '.json'), 'utf8'),
  ) as TokenizerRecord;
  const metadata = await ggufMetadata(vocabPath(name));
  return { record, metadata, tok: await ModelTokenizer.load(vocabPath(name)) };
}

describe("GGUF tokenizers against llama.cpp's", () => {
  it.each(VOCABS)('%s (%s, pre %s): the same ids for every text', async (name, model, pre) => {
    const { record, tok } = await load(name);
    expect([record.tokenizer_model, record.pre]).toEqual([model, pre]);
    expect(record.texts.length).toBeGreaterThan(40);
    record.texts.forEach((text, i) => {
      const ref = record.llama_cpp[i]!;
      expect({ text, ids: tok.encode(text) }).toEqual({ text, ids: ref.add_special });
      expect({ text, ids: tok.encode(text, { addSpecialTokens: false }) }).toEqual({
        text,
        ids: ref.no_add_special,
      });
    });
  });

  // llama.cpp's detokenizer cleans up spaces for GPT-2-style vocabularies (" ?" → "?", as
  // transformers' clean_up_tokenization_spaces); Kvasir's decoding stays lossless there.
  it.each([
    ['llama-spm', 'llama.cpp'],
    ['qwen2', 'llama.cpp'],
    ['llama-bpe', 'text'],
    ['gpt-2', 'text'],
  ] as const)('%s: decoding gives %s back', async (name, reference) => {
    const { record, tok } = await load(name);
    record.texts.forEach((text, i) => {
      const ref = record.llama_cpp[i]!;
      const expected = reference === 'text' ? text : ref.detokenized;
      expect({ text, decoded: tok.decode(ref.no_add_special) }).toEqual({
        text,
        decoded: expected,
      });
    });
  });

  it('the bos token follows llama.cpp: SentencePiece, Llama 3 and Tekken add it, Qwen2 and GPT-2 do not', async () => {
    for (const [name, adds] of [
      ['llama-spm', true],
      ['llama-bpe', true],
      ['gpt-2-tekken', true],
      ['qwen2', false],
      ['gpt-2', false],
    ] as const) {
      const { tok } = await load(name);
      expect(tok.encode('Hello')[0] === tok.bosTokenId, name).toBe(adds);
    }
  });

  it('an explicit tokenizer.ggml.add_bos_token wins over the pre-tokenizer default', async () => {
    const { metadata } = await load('llama-bpe');
    const off = new Map(metadata).set('tokenizer.ggml.add_bos_token', false);
    const tok = ModelTokenizer.fromGguf(off);
    expect(tok.encode('Hello')).not.toContain(tok.bosTokenId);
  });

  // llama.cpp's llama-vocab.cpp maps these names to the same pre-tokenizer and flags.
  it.each([
    ['qwen2', 'deepseek-r1-qwen'],
    ['llama-bpe', 'falcon3'],
    ['llama-bpe', 'pixtral'],
  ])("%s's texts tokenize the same under llama.cpp's alias %s", async (name, alias) => {
    const { record, metadata } = await load(name);
    const tok = ModelTokenizer.fromGguf(new Map(metadata).set('tokenizer.ggml.pre', alias));
    record.texts.forEach((text, i) => {
      expect({ text, ids: tok.encode(text) }).toEqual({
        text,
        ids: record.llama_cpp[i]!.add_special,
      });
    });
  });

  it('refuses a pre-tokenizer it does not implement, naming it', async () => {
    const { metadata } = await load('qwen2');
    const bad = new Map(metadata).set('tokenizer.ggml.pre', 'deepseek-coder');
    let err: unknown;
    try {
      ModelTokenizer.fromGguf(bad);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ModelError);
    expect((err as ModelError).code).toBe('UNSUPPORTED_TOKENIZER');
    expect((err as ModelError).message).toMatch(/deepseek-coder/);
  });
});
