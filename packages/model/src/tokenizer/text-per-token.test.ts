import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeModelConfig } from '../config.js';
import { writeRandomCheckpoint } from '../formats/random-checkpoint.js';
import { maxTextBytesPerToken } from './text-per-token.js';
import { ModelTokenizer } from './tokenizer.js';

let root: string;
let tok: ModelTokenizer;
beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'kvasir-tok-bytes-'));
  const config = makeModelConfig({
    hiddenSize: 16,
    intermediateSize: 32,
    numLayers: 1,
    numHeads: 2,
    vocabSize: 600,
  });
  await writeRandomCheckpoint(root, config, 1);
  tok = await ModelTokenizer.load(root, [257]);
});
afterAll(async () => {
  await rm(root, { recursive: true, force: true });
});

describe('maxTextBytesPerToken', () => {
  it('bounds the bytes of text per token: B bytes never encode to fewer than B / bound tokens', () => {
    const bound = tok.maxTextBytesPerToken;
    // The special tokens' text (`<|begin_of_text|>`, 17 bytes) is matched in prompts.
    expect(bound).toBeGreaterThanOrEqual(17);
    const words = fc.constantFrom(
      'the',
      ' the',
      ' cache',
      ' paged',
      ' blocks',
      '\n',
      '<|begin_of_text|>',
      '<|eot_id|>',
      'é',
      '🙂',
    );
    fc.assert(
      fc.property(
        fc.array(fc.oneof(words, fc.string({ unit: 'grapheme' })), { maxLength: 60 }),
        (parts) => {
          const text = parts.join('');
          const ids = tok.encode(text, { addSpecialTokens: false });
          expect(ids.length * bound!).toBeGreaterThanOrEqual(Buffer.byteLength(text));
        },
      ),
      { numRuns: 300 },
    );
    // The longest entry alone reaches it (`<|start_header_id|>`): the bound is tight.
    const added = tok.files.tokenizerJson.added_tokens as { content: string }[];
    expect(bound).toBe(
      Math.max(
        ...added.map((a) => Buffer.byteLength(a.content)),
        ...Array.from({ length: tok.vocabSize }, (_, id) => tok.tokenBytes(id)?.length ?? 0),
      ),
    );
  });

  const bpe = { type: 'BPE', unk_token: null, byte_fallback: false };
  it('is undefined where one token can stand for any amount of text', () => {
    expect(maxTextBytesPerToken({ model: bpe }, 5)).toBe(5);
    // An unknown token per character (at most 4 bytes), or per run of them.
    expect(maxTextBytesPerToken({ model: { ...bpe, unk_token: '<unk>' } }, 2)).toBe(4);
    expect(
      maxTextBytesPerToken({ model: { ...bpe, unk_token: '<unk>', fuse_unk: true } }, 2),
    ).toBeUndefined();
    expect(maxTextBytesPerToken({ model: { type: 'WordPiece' } }, 5)).toBeUndefined();
    // Normalizers and pre-tokenizers that drop text.
    expect(maxTextBytesPerToken({ model: bpe, normalizer: { type: 'Strip' } }, 5)).toBeUndefined();
    expect(
      maxTextBytesPerToken({ model: bpe, pre_tokenizer: { type: 'WhitespaceSplit' } }, 5),
    ).toBeUndefined();
    expect(
      maxTextBytesPerToken(
        { model: bpe, pre_tokenizer: { type: 'Split', behavior: 'Removed' } },
        5,
      ),
    ).toBeUndefined();
    expect(
      maxTextBytesPerToken({ model: bpe, added_tokens: [{ content: '<mask>', lstrip: true }] }, 5),
    ).toBeUndefined();
    // SentencePiece's spaces become 3-byte '▁': nothing shrinks; Unicode normalization may, 3×.
    const sentencePiece = {
      type: 'Sequence',
      normalizers: [
        { type: 'Prepend', prepend: '▁' },
        { type: 'Replace', pattern: { String: ' ' }, content: '▁' },
      ],
    };
    expect(maxTextBytesPerToken({ model: bpe, normalizer: sentencePiece }, 5)).toBe(5);
    expect(maxTextBytesPerToken({ model: bpe, normalizer: { type: 'NFC' } }, 5)).toBe(15);
  });
});
