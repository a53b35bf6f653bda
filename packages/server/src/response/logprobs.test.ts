import { describe, expect, it } from 'vitest';
import type { TokenLogprob } from '../generation-events.js';
import { chatLogprobs, completionLogprobs } from './logprobs.js';

const lp = (token: string, textOffset: number, top: string[] = []): TokenLogprob => ({
  tokenId: 1,
  token,
  logprob: -1,
  textOffset,
  top: top.map((t, i) => ({ tokenId: i, token: t, logprob: -2 - i })),
});

describe('completionLogprobs', () => {
  it('lists tokens with the offsets the engine placed them at', () => {
    expect(completionLogprobs([lp('ab', 0, ['x']), lp('c', 2, ['y'])], true)).toEqual({
      tokens: ['ab', 'c'],
      token_logprobs: [-1, -1],
      top_logprobs: [{ x: -2 }, { y: -2 }],
      text_offset: [0, 2],
    });
    expect(completionLogprobs([lp('ab', 0)], false).top_logprobs).toBeNull();
  });

  it('puts an echoed prompt first and shifts the generated offsets past its text', () => {
    const prompt = {
      kind: 'prompt' as const,
      text: 'Hey',
      logprobs: [
        { tokenId: 1, token: 'He', logprob: null, top: null, textOffset: 0 },
        {
          tokenId: 2,
          token: 'y',
          logprob: -0.5,
          top: [{ tokenId: 2, token: 'y', logprob: -0.5 }],
          textOffset: 2,
        },
      ],
    };
    const out = completionLogprobs([lp('!', 0)], true, { prompt, textLength: 3 });
    expect(out).toEqual({
      tokens: ['He', 'y', '!'],
      token_logprobs: [null, -0.5, -1],
      top_logprobs: [null, { y: -0.5 }, {}],
      text_offset: [0, 2, 3],
    });
  });

  it("takes the prompt tokens' offsets from the engine: a BOS adds no text", () => {
    const prompt = {
      kind: 'prompt' as const,
      text: 'Hi',
      logprobs: [
        { tokenId: 0, token: '<s>', logprob: null, top: null, textOffset: 0 },
        { tokenId: 5, token: 'Hi', logprob: -0.5, top: [], textOffset: 0 },
      ],
    };
    const out = completionLogprobs([lp('!', 0)], false, { prompt, textLength: 2 });
    expect(out.tokens).toEqual(['<s>', 'Hi', '!']);
    // Counting token lengths would give [0, 3, 2]: past the text, and out of order.
    expect(out.text_offset).toEqual([0, 0, 2]);
  });
});

describe('chatLogprobs', () => {
  it('gives each token and alternative its UTF-8 bytes', () => {
    expect(chatLogprobs([lp('é', 0, ['a'])])).toEqual({
      content: [
        {
          token: 'é',
          logprob: -1,
          bytes: [0xc3, 0xa9],
          top_logprobs: [{ token: 'a', logprob: -2, bytes: [0x61] }],
        },
      ],
      refusal: null,
    });
  });
});
