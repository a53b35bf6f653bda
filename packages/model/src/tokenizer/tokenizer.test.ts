import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeModelConfig } from '../config.js';
import { ModelError } from '../errors.js';
import { writeRandomCheckpoint } from '../formats/random-checkpoint.js';
import { renderChatTemplate } from './chat-template.js';
import { IncrementalDetokenizer } from './detokenizer.js';
import { ModelTokenizer } from './tokenizer.js';

let root: string;
let tok: ModelTokenizer;
beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'kvasir-tok-'));
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

// Text mixing ASCII, accents, CJK and emoji (4-byte UTF-8, surrogate pairs in JS).
const mixedText = fc
  .array(
    fc.oneof(
      fc.constantFrom(
        'the',
        ' cache',
        ' ',
        '\n',
        'é',
        'ü',
        '日本',
        '語',
        '中文',
        '🙂',
        '🚀',
        '👍🏽',
        '한국어',
        'ß',
        '42',
        '!',
      ),
      fc.string({ unit: 'binary', maxLength: 4 }),
    ),
    { maxLength: 12 },
  )
  .map((parts) => parts.join(''));

describe('ModelTokenizer', () => {
  it('loads the random checkpoint tokenizer with its special tokens', () => {
    expect(tok.bosTokenId).toBe(256);
    expect(tok.bosToken).toBe('<|begin_of_text|>');
    expect(tok.eosTokenIds).toEqual([260, 257]);
    // The fixed corpus yields fewer merges than the 600 embedding rows; the rest are padding.
    expect(tok.vocabSize).toBeGreaterThan(300);
    expect(tok.vocabSize).toBeLessThanOrEqual(600);
    expect(tok.isSpecial(260)).toBe(true);
    expect(tok.isSpecial(65)).toBe(false);
    expect(tok.tokenToId('<|eot_id|>')).toBe(260);
    expect(tok.idToToken(32)).toBe('Ġ');
  });

  it('round-trips any text through encode/decode', () => {
    fc.assert(
      fc.property(mixedText, (s) => {
        const ids = tok.encode(s, { addSpecialTokens: false });
        expect(tok.decode(ids)).toBe(s);
        for (const id of ids) expect(id).toBeLessThan(tok.vocabSize);
      }),
    );
  });

  it('adds bos, matches special tokens in text and can skip them when decoding', () => {
    const ids = tok.encode('hi<|eot_id|>');
    expect(ids[0]).toBe(256);
    expect(ids.at(-1)).toBe(260);
    expect(tok.decode(ids, { skipSpecialTokens: true })).toBe('hi');
    expect(tok.decode(ids)).toBe('<|begin_of_text|>hi<|eot_id|>');
    // Learned merges make common words shorter than their bytes.
    expect(tok.encode(' the cache', { addSpecialTokens: false }).length).toBeLessThan(
      ' the cache'.length,
    );
  });
});

describe('chat templates', () => {
  const msgs = [
    { role: 'system', content: 'You are terse.' },
    { role: 'user', content: ' Hi there ' },
  ];

  it('renders the Llama 3 format', () => {
    expect(tok.applyChatTemplate(msgs)).toBe(
      '<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>' +
        '<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>' +
        '<|start_header_id|>assistant<|end_header_id|>\n\n',
    );
    expect(
      tok.applyChatTemplate(msgs, { addGenerationPrompt: false }).endsWith('Hi there<|eot_id|>'),
    ).toBe(true);
  });

  it('encodes a chat with exactly one bos and the special tokens as single ids', () => {
    const ids = tok.encodeChat(msgs);
    expect(ids.filter((i) => i === 256)).toEqual([256]);
    expect(ids[0]).toBe(256);
    expect(ids.filter((i) => i === 260).length).toBe(2);
    expect(tok.decode(ids)).toBe(tok.applyChatTemplate(msgs));
  });

  it('reports template failures as CHAT_TEMPLATE', () => {
    const t =
      "{% if messages[0]['role'] != 'user' %}{{ raise_exception('first message must be user') }}{% endif %}ok";
    expect(renderChatTemplate(t, [{ role: 'user', content: 'x' }], {})).toBe('ok');
    try {
      renderChatTemplate(t, [{ role: 'system', content: 'x' }], {});
      throw new Error('expected a failure');
    } catch (e) {
      expect(ModelError.isInstance(e) && e.code === 'CHAT_TEMPLATE').toBe(true);
      expect((e as Error).message).toContain('first message must be user');
    }
    expect(() => renderChatTemplate('{% if %}', [], {})).toThrow(ModelError);
  });
});

/** No lone UTF-16 surrogate (what String.prototype.isWellFormed checks on newer targets). */
function wellFormed(s: string): boolean {
  return !/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/.test(s);
}

describe('IncrementalDetokenizer', () => {
  it('never emits a split character and reproduces the full text', () => {
    fc.assert(
      fc.property(mixedText, (s) => {
        const ids = tok.encode(s, { addSpecialTokens: false });
        const d = tok.createDetokenizer();
        let out = '';
        for (const id of ids) {
          const delta = d.push(id);
          expect(delta.includes('\uFFFD')).toBe(s.includes('\uFFFD') && delta.includes('\uFFFD'));
          expect(wellFormed(delta)).toBe(true);
          out += delta;
        }
        out += d.flush();
        expect(out).toBe(s);
        expect(d.text).toBe(s);
      }),
    );
  });

  it('holds back the bytes of an emoji until it is complete', () => {
    const ids = tok.encode('🙂', { addSpecialTokens: false });
    expect(ids.length).toBeGreaterThan(1);
    const d = tok.createDetokenizer();
    const deltas = ids.map((id) => d.push(id));
    expect(deltas.slice(0, -1).every((x) => x === '')).toBe(true);
    expect(deltas.at(-1)).toBe('🙂');
  });

  it('releases invalid UTF-8 after maxPendingTokens and on flush', () => {
    const lone = tok.encode('🙂', { addSpecialTokens: false }).slice(0, 1);
    const d = new IncrementalDetokenizer(tok, { maxPendingTokens: 2 });
    expect(d.push(lone[0]!)).toBe('');
    expect(d.push(lone[0]!)).toContain('\uFFFD');
    const d2 = tok.createDetokenizer();
    d2.push(lone[0]!);
    expect(d2.flush()).toBe('\uFFFD');
  });

  it('continues after prompt context without repeating it', () => {
    const prompt = tok.encode('Hello', { addSpecialTokens: false });
    const cont = tok.encode(' world 日本', { addSpecialTokens: false });
    const d = tok.createDetokenizer({}, prompt);
    let out = '';
    for (const id of cont) out += d.push(id);
    out += d.flush();
    expect(out).toBe(' world 日本');
  });
});

describe('GGUF SentencePiece tokenizer', () => {
  // A tiny SentencePiece BPE vocabulary in llama.cpp's GGUF form.
  const pieces: [string, number, number][] = [
    ['<unk>', 0, 2],
    ['<s>', 0, 3],
    ['</s>', 0, 3],
  ];
  for (let b = 0; b < 256; b++)
    pieces.push([`<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`, 0, 6]);
  const normal: [string, number][] = [
    ['▁', -1],
    ['h', -2],
    ['e', -3],
    ['l', -4],
    ['o', -5],
    ['w', -6],
    ['r', -7],
    ['d', -8],
    ['ll', -9],
    ['▁h', -10],
    ['▁he', -11],
    ['llo', -12],
    ['▁hello', -13],
    ['▁w', -14],
  ];
  for (const [p, s] of normal) pieces.push([p, s, 1]);
  const md = new Map<string, unknown>([
    ['tokenizer.ggml.model', 'llama'],
    ['tokenizer.ggml.tokens', pieces.map((p) => p[0])],
    ['tokenizer.ggml.scores', pieces.map((p) => p[1])],
    ['tokenizer.ggml.token_type', pieces.map((p) => p[2])],
    ['tokenizer.ggml.bos_token_id', 1],
    ['tokenizer.ggml.eos_token_id', 2],
    ['tokenizer.ggml.unknown_token_id', 0],
  ]);
  const id = (p: string) => pieces.findIndex((x) => x[0] === p);

  it('encodes with merges from scores, byte fallback and a leading space', () => {
    const t = ModelTokenizer.fromGguf(md);
    expect(t.encode('hello')).toEqual([1, id('▁hello')]);
    expect(t.encode('hello world', { addSpecialTokens: false })).toEqual([
      id('▁hello'),
      id('▁w'),
      id('o'),
      id('r'),
      id('l'),
      id('d'),
    ]);
    // 'é' is not in the vocabulary: its two UTF-8 bytes fall back to byte tokens.
    expect(t.encode('é', { addSpecialTokens: false })).toEqual([
      id('▁'),
      id('<0xC3>'),
      id('<0xA9>'),
    ]);
    expect(t.decode(t.encode('hello é world'), { skipSpecialTokens: true })).toBe('hello é world');
    expect(t.eosTokenIds).toEqual([2]);
  });

  it('streams SentencePiece text (leading space, byte fallback) without splitting characters', () => {
    const t = ModelTokenizer.fromGguf(md);
    const text = 'hello é world hello';
    const ids = t.encode(text);
    const d = t.createDetokenizer({ skipSpecialTokens: true });
    const deltas = ids.map((i) => d.push(i));
    expect(deltas.join('') + d.flush()).toBe(text);
    expect(deltas.every((x) => !x.includes('\uFFFD'))).toBe(true);
    // The first byte of 'é' alone is held back.
    expect(deltas[ids.indexOf(id('<0xC3>'))]).toBe('');
  });

  it("leaves unused tokens (a padded vocabulary's [PAD…] rows) out of text and grammars", () => {
    const padded = new Map(md);
    const tokens = [...pieces.map((p) => p[0]), '[PAD20]', '[PAD21]'];
    padded.set('tokenizer.ggml.tokens', tokens);
    padded.set('tokenizer.ggml.scores', [...pieces.map((p) => p[1]), 0, 0]);
    padded.set('tokenizer.ggml.token_type', [...pieces.map((p) => p[2]), 5, 5]);
    const t = ModelTokenizer.fromGguf(padded);
    const pad = tokens.indexOf('[PAD21]');
    const hello = t.encode('hello', { addSpecialTokens: false });
    expect(t.decode([...hello, pad], { skipSpecialTokens: true })).toBe('hello');
    const d = t.createDetokenizer({ skipSpecialTokens: true });
    expect([...hello, pad, ...hello].map((i) => d.push(i)).join('') + d.flush()).toBe(
      'hello hello',
    );
    expect(t.tokenBytes(pad)).toBeNull();
    expect(t.isSpecial(pad)).toBe(true);
    expect(t.encode('hello world')).toEqual(ModelTokenizer.fromGguf(md).encode('hello world'));
  });

  it('refuses tokenizer models it does not implement', () => {
    const bad = new Map(md);
    bad.set('tokenizer.ggml.model', 'bert');
    expect(() => ModelTokenizer.fromGguf(bad)).toThrow(/bert/);
    try {
      ModelTokenizer.fromGguf(bad);
    } catch (e) {
      expect((e as ModelError).code).toBe('UNSUPPORTED_TOKENIZER');
    }
  });
});
