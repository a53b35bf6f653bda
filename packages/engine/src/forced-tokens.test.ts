import { fileURLToPath } from 'node:url';
import { ModelTokenizer, tokenVocabulary, XGrammarCompiler } from '@kvasir/model';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { forcedTokens } from './forced-tokens.js';

// Jump-forward's tokens on a SentencePiece vocabulary (llama.cpp's Llama 2 vocabulary, cut to
// what its test texts reach; byte fallback, add_space_prefix): the tokenizer prefixes a space
// to whatever it encodes, so `{"` comes back as `▁`, `{`, `"`. The forced text has no such
// space: its tokens must be the text's own, as they are mid-text.
const SPM = fileURLToPath(
  new URL('../../../tooling/ggml-fixtures/tokenizers/llama-spm.gguf', import.meta.url),
);
const utf8 = new TextDecoder();

let tok: ModelTokenizer;
let compiler: XGrammarCompiler;
let vocab: ReturnType<typeof tokenVocabulary>;
beforeAll(async () => {
  tok = await ModelTokenizer.load(SPM);
  vocab = tokenVocabulary(tok);
  compiler = await XGrammarCompiler.create(vocab);
});
afterAll(() => {
  compiler.dispose();
});

const encode = (text: string) => tok.encode(text, { addSpecialTokens: false });
const spelled = (ids: readonly number[]) =>
  ids.map((id) => utf8.decode(vocab.tokens[id]!)).join('');

function schemaOf(keys: readonly string[]) {
  return {
    type: 'object',
    properties: Object.fromEntries(keys.map((k) => [k, { type: 'boolean' }])),
    required: keys,
    additionalProperties: false,
  };
}

describe('forcedTokens on a SentencePiece vocabulary', () => {
  it('takes the forced text without the space the tokenizer prefixes', async () => {
    const text = '{"name": "';
    expect(spelled(encode(text))).toBe(` ${text}`);
    const compiled = await compiler.compile({
      kind: 'json_schema',
      schema: { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] },
    });
    const matcher = await compiled.createMatcher();
    try {
      expect(matcher.forcedText()).toBe(text);
      const stopTokens = new Set(tok.eosTokenIds);
      const ids = forcedTokens(matcher, { room: 64, stopTokens, encode, pieces: vocab.tokens });
      expect(spelled(ids)).toBe(text);
      // The text's tokens after a newline: how the tokenizer splits it mid-text.
      expect(ids).toEqual(encode(`\n${text}`).slice(2));
      expect(matcher.length).toBe(ids.length);
      expect(matcher.forcedText()).toBe('');
    } finally {
      matcher.dispose();
    }
  });

  it('forces every fixed key of a schema, before the first value and after each', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.uniqueArray(fc.stringMatching(/^[a-z][a-z_]{0,9}$/), { minLength: 1, maxLength: 4 }),
        fc.array(fc.boolean(), { minLength: 4, maxLength: 4 }),
        async (keys, values) => {
          const compiled = await compiler.compile({ kind: 'json_schema', schema: schemaOf(keys) });
          const matcher = await compiled.createMatcher();
          const stopTokens = new Set(tok.eosTokenIds);
          const force = () =>
            forcedTokens(matcher, { room: 256, stopTokens, encode, pieces: vocab.tokens });
          try {
            let out = '';
            for (let i = 0; i < keys.length; i++) {
              const text = matcher.forcedText();
              const ids = force();
              expect(spelled(ids)).toBe(text);
              expect(text.endsWith(`"${keys[i]}": `)).toBe(true);
              out += text;
              // The value: the model's tokens, the plain tokenizer's here.
              const value = String(values[i]);
              for (const id of encode(`\n${value}`).slice(2)) expect(matcher.accept(id)).toBe(true);
              out += value;
            }
            const end = matcher.forcedText();
            expect(spelled(force())).toBe(end);
            out += end;
            expect(JSON.parse(out)).toEqual(Object.fromEntries(keys.map((k, i) => [k, values[i]])));
          } finally {
            matcher.dispose();
          }
        },
      ),
      { numRuns: 40 },
    );
  });
});
