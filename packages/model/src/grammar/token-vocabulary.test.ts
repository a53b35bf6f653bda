import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeModelConfig } from '../config.js';
import { ModelError } from '../errors.js';
import { writeRandomCheckpoint } from '../formats/random-checkpoint.js';
import { vocabPath } from '../testing/arch-fixtures.js';
import { ModelTokenizer } from '../tokenizer/tokenizer.js';
import { tokenVocabulary } from './token-vocabulary.js';

const utf8 = new TextDecoder('utf-8', { fatal: true });

/** The text a run of ids stands for, from the vocabulary's bytes alone (specials skipped). */
function textOf(vocab: ReturnType<typeof tokenVocabulary>, ids: readonly number[]): string {
  const parts = ids.map((id) => vocab.tokens[id]).filter((b): b is Uint8Array => b !== null);
  const all = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let offset = 0;
  for (const p of parts) {
    all.set(p, offset);
    offset += p.length;
  }
  return utf8.decode(all);
}

// Real vocabularies (llama.cpp's, cut to what its test texts reach), byte-level BPE and
// SentencePiece with byte fallback, and llama.cpp's own test texts (emoji split over tokens,
// CJK, Khmer, runs of whitespace).
const BYTE_LEVEL = ['qwen2', 'llama-bpe', 'gpt-2', 'gpt-2-tekken', 'gpt-2-smollm'] as const;
const SENTENCEPIECE = ['llama-spm', 'llama-spm-eos'] as const;

async function fixture(name: string) {
  const record = JSON.parse(
    await readFile(vocabPath(name).replace(/\.gguf$/, '.json'), 'utf8'),
  ) as { texts: string[] };
  return { texts: record.texts, tok: await ModelTokenizer.load(vocabPath(name)) };
}

describe('tokenVocabulary', () => {
  it.each(BYTE_LEVEL)(
    '%s (byte-level BPE): the bytes of the ids spell the text exactly',
    async (name) => {
      const { texts, tok } = await fixture(name);
      const vocab = tokenVocabulary(tok);
      expect(vocab.size).toBe(tok.vocabSize);
      for (const text of texts) {
        const ids = tok.encode(text, { addSpecialTokens: false });
        // Special tokens in the text (chat markup) are not text: their bytes are null.
        let plain = text;
        for (const id of ids) {
          if (tok.isSpecial(id)) {
            expect(vocab.tokens[id]).toBeNull();
            plain = plain.replace(tok.idToToken(id)!, '');
          }
        }
        expect({ text, got: textOf(vocab, ids) }).toEqual({ text, got: plain });
      }
    },
  );

  it.each(SENTENCEPIECE)(
    '%s (SentencePiece, byte fallback): ▁ is a space, <0xNN> a byte',
    async (name) => {
      const { texts, tok } = await fixture(name);
      const vocab = tokenVocabulary(tok);
      let checked = 0;
      for (const text of texts) {
        const ids = tok.encode(text, { addSpecialTokens: false });
        if (text === '' || ids.some((id) => tok.isSpecial(id))) continue;
        // The normalizer prepends the space SentencePiece's decoder strips again.
        expect({ text, got: textOf(vocab, ids) }).toEqual({ text, got: ` ${text}` });
        checked++;
      }
      expect(checked).toBeGreaterThan(40);
      const byte = tok.tokenToId('<0x0A>')!;
      expect(vocab.tokens[byte]).toEqual(Uint8Array.of(0x0a));
    },
  );

  it('gives control and unknown tokens no bytes, and pads to the model size', async () => {
    const { tok } = await fixture('llama-spm');
    const vocab = tokenVocabulary(tok, { size: tok.vocabSize + 7 });
    expect(vocab.size).toBe(tok.vocabSize + 7);
    expect(vocab.tokens).toHaveLength(tok.vocabSize + 7);
    expect(vocab.tokens[tok.tokenToId('<s>')!]).toBeNull();
    expect(vocab.tokens[tok.tokenToId('</s>')!]).toBeNull();
    expect(vocab.tokens[tok.tokenToId('<unk>')!]).toBeNull();
    expect(vocab.tokens.slice(tok.vocabSize).every((t) => t === null)).toBe(true);
    expect(vocab.stopTokenIds).toEqual(tok.eosTokenIds);
    expect(() => tokenVocabulary(tok, { size: tok.vocabSize - 1 })).toThrow(ModelError);
  });
});

describe('tokenVocabulary on a Hugging Face tokenizer.json (the random checkpoint)', () => {
  let root: string;
  let tok: ModelTokenizer;
  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), 'kvasir-vocab-'));
    const config = makeModelConfig({
      hiddenSize: 64,
      intermediateSize: 128,
      numLayers: 1,
      numHeads: 2,
      numKvHeads: 1,
      vocabSize: 512,
    });
    await writeRandomCheckpoint(root, config, 3);
    tok = await ModelTokenizer.load(root);
  });
  afterAll(async () => {
    await rm(root, { recursive: true, force: true });
  });

  it('spells any text exactly, whatever the characters', () => {
    const vocab = tokenVocabulary(tok);
    fc.assert(
      fc.property(fc.string({ unit: 'grapheme', maxLength: 40 }), (text) => {
        const ids = tok.encode(text, { addSpecialTokens: false });
        expect(textOf(vocab, ids)).toBe(text);
      }),
      { numRuns: 300 },
    );
  });
});
