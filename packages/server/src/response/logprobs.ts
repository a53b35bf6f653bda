import type { PromptEvent, TokenLogprob, TopLogprob } from '../generation-events.js';

/** OpenAI's legacy completions `logprobs` object. */
export interface CompletionLogprobs {
  readonly tokens: string[];
  readonly token_logprobs: (number | null)[];
  readonly top_logprobs: (Record<string, number> | null)[] | null;
  readonly text_offset: number[];
}

/** The echoed prompt a completion's log-probabilities start with. */
export interface EchoedPrompt {
  readonly prompt: PromptEvent;
  /** Length of the echoed text the generated text follows. */
  readonly textLength: number;
}

const topObject = (list: readonly TopLogprob[] | null) =>
  list === null ? null : Object.fromEntries(list.map((t) => [t.token, t.logprob]));

/**
 * OpenAI's legacy `logprobs` object of a completion; with `echoed`, the prompt's tokens come
 * first (the first one with `null` log-probability and alternatives) and the generated tokens'
 * offsets move past the echoed text.
 */
export function completionLogprobs(
  logprobs: readonly TokenLogprob[],
  withTop: boolean,
  echoed?: EchoedPrompt,
): CompletionLogprobs {
  const tokens: string[] = [];
  const tokenLogprobs: (number | null)[] = [];
  const top: (Record<string, number> | null)[] = [];
  const offsets: number[] = [];
  let shift = 0;
  if (echoed) {
    // The engine places each prompt token in its decoded text; a token's own text would not do
    // (BOS shows as `<s>` in `tokens` but adds nothing to the text). The echo is the prompt as
    // sent, which that decoding gives back whenever the tokenizer round-trips it.
    for (const lp of echoed.prompt.logprobs ?? []) {
      tokens.push(lp.token);
      tokenLogprobs.push(lp.logprob);
      top.push(topObject(lp.top));
      offsets.push(Math.min(lp.textOffset, echoed.textLength));
    }
    shift = echoed.textLength;
  }
  for (const lp of logprobs) {
    tokens.push(lp.token);
    tokenLogprobs.push(lp.logprob);
    top.push(topObject(lp.top));
    offsets.push(lp.textOffset + shift);
  }
  return {
    tokens,
    token_logprobs: tokenLogprobs,
    top_logprobs: withTop ? top : null,
    text_offset: offsets,
  };
}

const bytes = (s: string) => Array.from(Buffer.from(s, 'utf8'));

/** OpenAI's chat `logprobs` object: each token with its UTF-8 bytes and its alternatives. */
export function chatLogprobs(logprobs: readonly TokenLogprob[]) {
  return {
    content: logprobs.map((lp) => ({
      token: lp.token,
      logprob: lp.logprob,
      bytes: bytes(lp.token),
      top_logprobs: lp.top.map((t) => ({
        token: t.token,
        logprob: t.logprob,
        bytes: bytes(t.token),
      })),
    })),
    refusal: null,
  };
}
