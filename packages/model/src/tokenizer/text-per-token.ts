/**
 * How much input text one token can stand for, read from a `tokenizer.json`: the bound that
 * lets a server refuse a prompt too long for the context without tokenizing it.
 */

type Json = Record<string, unknown>;

// TextEncoder, not Node's Buffer: the tokenizer also runs in browsers and workers.
const encoder = new TextEncoder();
const utf8Length = (s: string) => encoder.encode(s).byteLength;

/**
 * The most a normalizer can shrink text, as a factor on UTF-8 bytes (1: never), or undefined
 * when it can drop text without bound (stripping, removing accents or control characters, a
 * replacement by less, anything not known here). Unicode normalization and lowercasing shrink a
 * character at most threefold (three Hangul jamo of 3 bytes compose into one syllable of 3, the
 * 3-byte Kelvin sign lowercases to `k`).
 */
function normalizerShrink(normalizer: unknown): number | undefined {
  if (normalizer === null || normalizer === undefined) return 1;
  const n = normalizer as Json;
  switch (n.type) {
    case 'Sequence': {
      let factor = 1;
      for (const part of (n.normalizers as unknown[] | undefined) ?? []) {
        const f = normalizerShrink(part);
        if (f === undefined) return undefined;
        factor *= f;
      }
      return factor;
    }
    case 'Prepend':
      return 1;
    case 'Replace': {
      const pattern = (n.pattern as Json | undefined)?.String;
      const content = n.content;
      if (typeof pattern !== 'string' || typeof content !== 'string' || content === '') {
        return undefined;
      }
      return Math.max(1, utf8Length(pattern) / utf8Length(content));
    }
    case 'NFC':
    case 'NFD':
    case 'NFKC':
    case 'NFKD':
    case 'Lowercase':
      return 3;
    default:
      return undefined;
  }
}

/** Whether a pre-tokenizer keeps every character of its input (it only splits). */
function preTokenizerKeepsText(preTokenizer: unknown): boolean {
  if (preTokenizer === null || preTokenizer === undefined) return true;
  const p = preTokenizer as Json;
  switch (p.type) {
    case 'Sequence':
      return ((p.pretokenizers as unknown[] | undefined) ?? []).every(preTokenizerKeepsText);
    case 'ByteLevel':
    case 'Metaspace':
    case 'Digits':
    case 'UnicodeScripts':
      return true;
    case 'Split':
    case 'Punctuation':
      return p.behavior !== 'Removed';
    default:
      // Whitespace, WhitespaceSplit, BertPreTokenizer, CharDelimiterSplit drop what they split on.
      return false;
  }
}

/**
 * The most UTF-8 bytes of input text one token of this tokenizer can stand for, or undefined
 * when no such bound holds: a model other than BPE, an unknown token that fuses runs of unknown
 * characters, added tokens that swallow the whitespace around them, or a normalizer or
 * pre-tokenizer that can drop text. So a text of B bytes encodes to at least ⌈B / bound⌉
 * tokens.
 *
 * @param tokenizerJson - the parsed `tokenizer.json`.
 * @param longestPiece - the most bytes of output text any vocabulary entry stands for.
 */
export function maxTextBytesPerToken(
  tokenizerJson: Json,
  longestPiece: number,
): number | undefined {
  const model = tokenizerJson.model as Json | undefined;
  if (model?.type !== 'BPE') return undefined;
  let longest = longestPiece;
  if (model.unk_token !== null && model.unk_token !== undefined && model.byte_fallback !== true) {
    if (model.fuse_unk === true) return undefined;
    // One unknown character, at most 4 bytes, per unknown token.
    longest = Math.max(longest, 4);
  }
  for (const added of (tokenizerJson.added_tokens as Json[] | undefined) ?? []) {
    if (added.lstrip === true || added.rstrip === true) return undefined;
    if (typeof added.content === 'string') longest = Math.max(longest, utf8Length(added.content));
  }
  if (!preTokenizerKeepsText(tokenizerJson.pre_tokenizer)) return undefined;
  const shrink = normalizerShrink(tokenizerJson.normalizer);
  if (shrink === undefined) return undefined;
  return Math.ceil(Math.max(1, longest) * shrink);
}
