import { ModelError } from '../errors.js';
import type { TokenVocabulary } from './output-constraint.js';

/** What {@link tokenVocabulary} reads of a tokenizer (a {@link ModelTokenizer} has it all). */
export interface VocabularySource {
  /** Ids the tokenizer can produce. */
  readonly vocabSize: number;
  /** End-of-sequence ids. */
  readonly eosTokenIds: readonly number[];
  /** The bytes of a token's text, `null` for tokens that are not text. */
  tokenBytes(id: number): Uint8Array | null;
}

/**
 * The vocabulary of a tokenizer as a grammar engine needs it (see {@link TokenVocabulary}).
 *
 * @param options.size - the logits row length when the model's embedding has more rows than
 *   the tokenizer has ids (padding rows are never text); default the tokenizer's size.
 * @param options.stopTokenIds - ids that end a sequence; default the tokenizer's EOS ids.
 * @param options.textTokens - control tokens that stand for a text in the output (Mistral's
 *   `[TOOL_CALLS]`, which opens tool calls), by id: a grammar that asks for the text may emit
 *   the token.
 * @throws {@link ModelError} `INVALID_ARGUMENT` when `size` is below the tokenizer's size.
 */
export function tokenVocabulary(
  tokenizer: VocabularySource,
  options: {
    readonly size?: number;
    readonly stopTokenIds?: readonly number[];
    readonly textTokens?: ReadonlyMap<number, string>;
  } = {},
): TokenVocabulary {
  const size = options.size ?? tokenizer.vocabSize;
  if (!Number.isInteger(size) || size < tokenizer.vocabSize) {
    throw new ModelError(
      'INVALID_ARGUMENT',
      `tokenVocabulary: size ${size} is below the tokenizer's ${tokenizer.vocabSize} ids`,
    );
  }
  const tokens: (Uint8Array | null)[] = new Array(size).fill(null);
  for (let id = 0; id < tokenizer.vocabSize; id++) tokens[id] = tokenizer.tokenBytes(id);
  const utf8 = new TextEncoder();
  for (const [id, text] of options.textTokens ?? []) {
    if (Number.isInteger(id) && id >= 0 && id < size) tokens[id] = utf8.encode(text);
  }
  const stopTokenIds = (options.stopTokenIds ?? tokenizer.eosTokenIds).filter(
    (id) => Number.isInteger(id) && id >= 0 && id < size,
  );
  return { size, tokens, stopTokenIds };
}
