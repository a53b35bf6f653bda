// What a generation stream yields (part of the `InferenceEngine` contract, version `v1`): the
// echoed prompt, each choice's deltas with their log-probabilities, and the usage at the end.

/** One alternative token with its log-probability. */
export interface TopLogprob {
  readonly tokenId: number;
  /** The token's text (may be a partial character, shown as the engine decodes it). */
  readonly token: string;
  readonly logprob: number;
}

/** The log-probability of a chosen token and its best alternatives. */
export interface TokenLogprob extends TopLogprob {
  /** The `logprobs` best alternatives, most likely first. */
  readonly top: readonly TopLogprob[];
  /**
   * Where the token's text starts in its choice's text, in UTF-16 code units (OpenAI's
   * `text_offset`); capped at the text's length for a token cut by a stop string.
   */
  readonly textOffset: number;
}

/** One prompt token as echoed back: its text and log-probability given the tokens before it. */
export interface PromptTokenLogprob {
  readonly tokenId: number;
  /** The token's text, as in {@link TopLogprob.token}. */
  readonly token: string;
  /** `null` for the first prompt token, which nothing predicts. */
  readonly logprob: number | null;
  /** The request's `logprobs` most likely tokens at this position, most likely first; `null` for the first. */
  readonly top: readonly TopLogprob[] | null;
  /**
   * Where the token's text starts in {@link PromptEvent.text}, in UTF-16 code units (OpenAI's
   * `text_offset`): a token that adds no text (BOS, other special tokens) or only part of a
   * character is placed where the next text starts.
   */
  readonly textOffset: number;
}

/** The prompt, echoed: sent once, before any delta, when the request asked for `echo`. */
export interface PromptEvent {
  readonly kind: 'prompt';
  /** The prompt's text as the engine decodes its tokens (special tokens skipped). */
  readonly text: string;
  /** One entry per prompt token, when the request asked for log-probabilities. */
  readonly logprobs?: readonly PromptTokenLogprob[];
}

/**
 * Why a choice ended: `stop` (EOS, a stop token, or a stop string), `length` (max tokens or
 * context), `abort` (cancelled).
 */
export type FinishReason = 'stop' | 'length' | 'abort';

/** New tokens for one choice. Several per step are allowed; text may be empty. */
export interface ChoiceDelta {
  readonly kind: 'delta';
  /** Choice index in `[0, n)`. */
  readonly index: number;
  readonly tokenIds: readonly number[];
  /**
   * Text these tokens add (incremental detokenization: may be empty when a multi-byte character
   * is incomplete, or held back while it could begin a stop string).
   */
  readonly text: string;
  /**
   * When the request asked for log-probabilities: the entries of the tokens whose text this
   * delta completes, in order. Without stop strings that is one per token id; with them a
   * token's entry waits for its held-back text, and a token whose text starts inside a stop
   * string has none.
   */
  readonly logprobs?: readonly TokenLogprob[];
  /** Set on the last delta of a choice. */
  readonly finishReason?: FinishReason;
}

/** Token accounting for the whole request, sent once at the end. */
export interface UsageEvent {
  readonly kind: 'usage';
  readonly promptTokens: number;
  /** Prompt tokens served from the prefix cache (or an offload tier) instead of computed. */
  readonly cachedPromptTokens: number;
  /** Generated tokens over all choices. */
  readonly completionTokens: number;
}

/** What a generation stream yields. */
export type GenerationEvent = ChoiceDelta | UsageEvent | PromptEvent;

/**
 * A running generation, returned once the engine has admitted the request: the echoed prompt
 * when asked, deltas of every choice (each ends with one carrying its finish reason), then one
 * usage event. Stopping early is the engine's job (stop tokens, stop strings, limits); the
 * server only cancels, through the request's `AbortSignal`.
 */
export type GenerationStream = AsyncIterable<GenerationEvent>;
