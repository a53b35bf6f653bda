/** What an {@link IncrementalDetokenizer} needs: decoding a run of token ids to text. */
export interface TokenDecoder {
  /** Decodes ids to text; incomplete UTF-8 sequences come out as U+FFFD. */
  decode(ids: readonly number[], options?: { skipSpecialTokens?: boolean }): string;
}

/** Options of {@link IncrementalDetokenizer}. */
export interface DetokenizerOptions {
  /** Leave special tokens out of the text. Default false. */
  readonly skipSpecialTokens?: boolean;
  /**
   * Tokens a character may span before the pending text is released even though it still ends
   * in U+FFFD (a model can emit invalid UTF-8). Default 8: longer than any UTF-8 character.
   */
  readonly maxPendingTokens?: number;
}

/**
 * Turns a stream of token ids into a stream of text deltas for streaming responses, never
 * emitting half of a multi-byte character: a character whose bytes span several byte-level
 * tokens (emoji, CJK) is held back until it is complete.
 *
 * It decodes a short window of recent tokens twice, with and without the newest ones, and
 * emits the difference (the prefix/read offset method), so it is correct for any decoder,
 * including ones that strip or merge spaces at token boundaries.
 *
 * @example
 * ```ts
 * const detok = tokenizer.createDetokenizer();
 * for (const id of ids) process.stdout.write(detok.push(id));
 * process.stdout.write(detok.flush());
 * ```
 */
export class IncrementalDetokenizer {
  private readonly ids: number[] = [];
  private prefixOffset = 0;
  private readOffset = 0;
  private readonly skip: boolean;
  private readonly maxPending: number;
  private emitted = '';

  /**
   * @param decoder - usually a {@link ModelTokenizer}.
   * @param initialIds - tokens already shown (e.g. the prompt), used only as context.
   */
  constructor(
    private readonly decoder: TokenDecoder,
    options?: DetokenizerOptions,
    initialIds: readonly number[] = [],
  ) {
    this.skip = options?.skipSpecialTokens ?? false;
    this.maxPending = options?.maxPendingTokens ?? 8;
    // A few context tokens let decoders that treat the first token specially (SentencePiece's
    // leading space) decode the continuation as they would in the full text.
    const ctx = initialIds.slice(-4);
    this.ids.push(...ctx);
    this.prefixOffset = 0;
    this.readOffset = ctx.length;
  }

  /** All text emitted so far. */
  get text(): string {
    return this.emitted;
  }

  /** Adds one token; returns the text that became complete (possibly empty). */
  push(id: number): string {
    this.ids.push(id);
    const opts = { skipSpecialTokens: this.skip };
    const prefixText = this.decoder.decode(
      this.ids.slice(this.prefixOffset, this.readOffset),
      opts,
    );
    const newText = this.decoder.decode(this.ids.slice(this.prefixOffset), opts);
    const pending = this.ids.length - this.readOffset;
    if (
      newText.length > prefixText.length &&
      (!newText.endsWith('\uFFFD') || pending >= this.maxPending)
    ) {
      const delta = newText.slice(prefixText.length);
      this.prefixOffset = this.readOffset;
      this.readOffset = this.ids.length;
      if (this.prefixOffset > 256) {
        this.ids.splice(0, this.prefixOffset);
        this.readOffset -= this.prefixOffset;
        this.prefixOffset = 0;
      }
      this.emitted += delta;
      return delta;
    }
    return '';
  }

  /** Ends the stream: returns whatever is still held back (an incomplete character as U+FFFD). */
  flush(): string {
    if (this.readOffset === this.ids.length) return '';
    const opts = { skipSpecialTokens: this.skip };
    const prefixText = this.decoder.decode(
      this.ids.slice(this.prefixOffset, this.readOffset),
      opts,
    );
    const newText = this.decoder.decode(this.ids.slice(this.prefixOffset), opts);
    this.prefixOffset = this.readOffset;
    this.readOffset = this.ids.length;
    const delta = newText.length > prefixText.length ? newText.slice(prefixText.length) : '';
    this.emitted += delta;
    return delta;
  }
}
