import { byteLevelAlphabet } from '../formats/byte-level-bpe.js';

/**
 * How a tokenizer's vocabulary spells bytes in its token strings, read from `tokenizer.json`'s
 * decoder: GPT-2's byte-level alphabet (`Ġ` for a space), SentencePiece (`▁` for a space, `<0x0A>`
 * byte-fallback pieces), or plain text.
 */
export type PieceSpelling = 'byte-level' | 'sentencepiece' | 'text';

/** The spelling of a `tokenizer.json`'s pieces, from its decoder (and its model's byte fallback). */
export function pieceSpelling(tokenizerJson: Record<string, unknown>): PieceSpelling {
  const decoder = JSON.stringify(tokenizerJson.decoder ?? null);
  if (decoder.includes('"ByteLevel"')) return 'byte-level';
  const model = tokenizerJson.model as { byte_fallback?: unknown } | undefined;
  if (
    decoder.includes('"ByteFallback"') ||
    decoder.includes('"Metaspace"') ||
    decoder.includes('"▁"') ||
    model?.byte_fallback === true
  ) {
    return 'sentencepiece';
  }
  return 'text';
}

let charToByte: Map<string, number> | undefined;

function byteLevelInverse(): Map<string, number> {
  if (!charToByte) {
    charToByte = new Map(byteLevelAlphabet().map((c, b) => [c, b]));
  }
  return charToByte;
}

const utf8 = new TextEncoder();
const BYTE_PIECE = /^<0x([0-9A-Fa-f]{2})>$/;

/**
 * The bytes a vocabulary piece stands for in output text. Byte-level pieces map each character
 * back through GPT-2's alphabet (so a piece may be part of a UTF-8 character); SentencePiece's
 * `<0xNN>` pieces are the byte NN and `▁` is a space; plain pieces are their UTF-8.
 */
export function pieceBytes(piece: string, spelling: PieceSpelling): Uint8Array {
  if (spelling === 'byte-level') {
    const inverse = byteLevelInverse();
    const out: number[] = [];
    for (const ch of piece) {
      const b = inverse.get(ch);
      if (b !== undefined) out.push(b);
      else for (const x of utf8.encode(ch)) out.push(x);
    }
    return Uint8Array.from(out);
  }
  if (spelling === 'sentencepiece') {
    const m = BYTE_PIECE.exec(piece);
    if (m) return Uint8Array.of(Number.parseInt(m[1]!, 16));
    return utf8.encode(piece.replaceAll('▁', ' '));
  }
  return utf8.encode(piece);
}
