// Jump-forward decoding's tokens: the text a constraint forces next, in the model's tokens.
import type { TokenMatcher, TokenVocabulary } from '@kvasir/model';

const UTF8 = new TextEncoder();

/** Whether `piece` is `bytes` from `at` on. */
function spells(bytes: Uint8Array, at: number, piece: Uint8Array): boolean {
  if (at + piece.length > bytes.length) return false;
  for (let i = 0; i < piece.length; i++) if (bytes[at + i] !== piece[i]) return false;
  return true;
}

/**
 * Jump-forward decoding: the tokens `matcher`'s constraint forces next, accepted by it, at most
 * `room` of them; empty when nothing is forced. The forced text is tokenized with the model's
 * tokenizer (`encode`, adding no special tokens) as it would be in the middle of a text (see
 * {@link textTokens}), and tokens are taken while each spells the next bytes of that text
 * (`pieces`: each token's bytes), is not a stop token (those end a choice: the model samples
 * them) and the matcher accepts it. Text the vocabulary cannot spell (a special token's text)
 * ends the jump there, and what follows is sampled as usual.
 */
export function forcedTokens(
  matcher: TokenMatcher,
  options: {
    readonly room: number;
    readonly stopTokens: ReadonlySet<number>;
    readonly encode: (text: string) => readonly number[];
    readonly pieces: TokenVocabulary['tokens'];
  },
): number[] {
  const { room, stopTokens, encode, pieces } = options;
  if (room <= 0 || matcher.isTerminated) return [];
  const text = matcher.forcedText();
  if (text === '') return [];
  const bytes = UTF8.encode(text);
  const taken: number[] = [];
  let at = 0;
  for (const id of textTokens(text, bytes, encode, pieces)) {
    if (taken.length >= room || stopTokens.has(id)) break;
    const piece = pieces[id];
    if (!piece || piece.length === 0 || !spells(bytes, at, piece)) break;
    if (!matcher.accept(id)) break;
    taken.push(id);
    at += piece.length;
  }
  return taken;
}

/** What {@link textTokens} puts before a text to learn how it is tokenized mid-text. */
const SEPARATOR = '\n';
const SEPARATOR_BYTE = 0x0a;

/**
 * `text`'s tokens as they are in the middle of a text. A SentencePiece tokenizer prefixes a
 * space to what it encodes (`add_space_prefix`: `{"` becomes `▁{"` or `▁`, `{`, `"`), which
 * the model writes only at the start of a text, and which the text forced here does not have.
 * Then `text` is encoded after a newline (which SentencePiece and byte-level BPE keep apart from
 * what follows), and the tokens after the newline's are `text`'s. When neither way spells the
 * text from its first byte, the first; the caller stops where the bytes part.
 */
function textTokens(
  text: string,
  bytes: Uint8Array,
  encode: (text: string) => readonly number[],
  pieces: TokenVocabulary['tokens'],
): readonly number[] {
  const plain = encode(text);
  const first = pieces[plain[0] ?? -1];
  if (!first || first.length === 0 || spells(bytes, 0, first)) return plain;
  const after = encode(SEPARATOR + text);
  for (let i = 0; i < after.length; i++) {
    const piece = pieces[after[i]!];
    if (!piece || piece.length === 0) return plain;
    // The separator's token ends in the newline, spelled by the bytes before it alone.
    if (piece[piece.length - 1] === SEPARATOR_BYTE) {
      const rest = after.slice(i + 1);
      const next = pieces[rest[0] ?? -1];
      return next && next.length > 0 && spells(bytes, 0, next) ? rest : plain;
    }
  }
  return plain;
}
