import { bitmaskAllows, ModelTokenizer, XGrammarCompiler } from '@kvasir/model';
import { afterAll, describe, expect, it } from 'vitest';
import { codecFor } from './load-model-runner.js';

// A crafted SentencePiece vocabulary in which Mistral's `[TOOL_CALLS]` is a control token, as in
// Mistral's own files, with a template that writes it: the codec must let a grammar that asks
// for the text `[TOOL_CALLS]` take the token, and show the token as that text (where the tool
// parser looks for it) while other control tokens stay out of the output.
const pieces: [string, number, number][] = [
  ['<unk>', 0, 2],
  ['<s>', 0, 3],
  ['</s>', 0, 3],
  ['[TOOL_CALLS]', 0, 3],
  ['[INST]', 0, 3],
];
for (let b = 0; b < 256; b++) {
  pieces.push([`<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`, 0, 6]);
}
for (const [p, s] of [
  ['▁', -1],
  ['h', -2],
  ['i', -3],
  ['[', -4],
  [']', -5],
] as const) {
  pieces.push([p, s, 1]);
}
const metadata = new Map<string, unknown>([
  ['tokenizer.ggml.model', 'llama'],
  ['tokenizer.ggml.tokens', pieces.map((p) => p[0])],
  ['tokenizer.ggml.scores', pieces.map((p) => p[1])],
  ['tokenizer.ggml.token_type', pieces.map((p) => p[2])],
  ['tokenizer.ggml.bos_token_id', 1],
  ['tokenizer.ggml.eos_token_id', 2],
  ['tokenizer.ggml.unknown_token_id', 0],
  ['tokenizer.chat_template', '{{ bos_token }}[INST]{{ messages[0].content }}[TOOL_CALLS]'],
]);
const id = (p: string) => pieces.findIndex((x) => x[0] === p);
const TOOL_CALLS = id('[TOOL_CALLS]');

const codec = codecFor(ModelTokenizer.fromGguf(metadata));
afterAll(async () => {
  await codec.close?.();
});

describe("a tool-call format's control token (Mistral's [TOOL_CALLS])", () => {
  it('is shown as its text in the output, other control tokens are not', () => {
    expect(codec.toolCallFormat).toBe('mistral');
    const decoder = codec.decoder();
    const ids = [id('h'), id('i'), TOOL_CALLS, id('['), id('h'), id(']'), id('[INST]'), id('</s>')];
    expect(ids.map((t) => decoder.push(t)).join('') + decoder.flush()).toBe('hi[TOOL_CALLS][h]');
  });

  it('is what a grammar asking for the text may emit', async () => {
    const vocabulary = codec.vocabulary!({ size: pieces.length, stopTokenIds: [2] });
    expect(new TextDecoder().decode(vocabulary.tokens[TOOL_CALLS]!)).toBe('[TOOL_CALLS]');
    expect(vocabulary.tokens[id('[INST]')]).toBeNull();
    const compiler = await XGrammarCompiler.create(vocabulary);
    try {
      const compiled = await compiler.compile({
        kind: 'regex',
        pattern: '\\[TOOL_CALLS\\]\\[[hi]+\\]',
      });
      const matcher = await compiled.createMatcher();
      expect(bitmaskAllows(await matcher.nextTokenBitmask(), TOOL_CALLS)).toBe(true);
      expect(matcher.accept(TOOL_CALLS)).toBe(true);
      expect(matcher.forcedText()).toBe('[');
      for (const t of [id('['), id('h'), id(']')]) expect(matcher.accept(t)).toBe(true);
      expect(matcher.accept(2)).toBe(true);
      expect(matcher.isTerminated).toBe(true);
      matcher.dispose();
    } finally {
      compiler.dispose();
    }
  });
});
