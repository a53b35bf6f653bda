// Which tokens keep a byte stream valid UTF-8, per decoder state, as bitmasks over the vocabulary.
//
// XGrammar (0.1.27) matches non-ASCII characters leniently: after `"` of a JSON string it allows
// lead bytes C0, C1 and F5–F7, and after E0, ED, F0 or F4 any continuation byte, so a constrained
// output can end up with overlong forms, surrogates or code points past U+10FFFF, which decode
// to U+FFFD (and then break `maxLength` or a pattern). Intersecting its mask with these keeps every
// constrained output valid UTF-8; what is valid never depended on the grammar.
import { bitmaskWords, type TokenBitmask, type TokenVocabulary } from './output-constraint.js';

/** Decoder states: 0 between characters; the others wait for continuation bytes. */
const START = 0;
const NEED1 = 1;
const NEED2 = 2;
const NEED3 = 3;
/** After E0: A0–BF (no overlong), then one more. */
const AFTER_E0 = 4;
/** After ED: 80–9F (no surrogates), then one more. */
const AFTER_ED = 5;
/** After F0: 90–BF (no overlong), then two more. */
const AFTER_F0 = 6;
/** After F4: 80–8F (nothing past U+10FFFF), then two more. */
const AFTER_F4 = 7;
const STATES = 8;
const INVALID = -1;

/** The decoder state after `byte` in state `state` (RFC 3629's table), or -1. */
function step(state: number, byte: number): number {
  const cont = byte >= 0x80 && byte <= 0xbf;
  switch (state) {
    case START:
      if (byte < 0x80) return START;
      if (byte >= 0xc2 && byte <= 0xdf) return NEED1;
      if (byte === 0xe0) return AFTER_E0;
      if (byte === 0xed) return AFTER_ED;
      if (byte >= 0xe1 && byte <= 0xef) return NEED2;
      if (byte === 0xf0) return AFTER_F0;
      if (byte >= 0xf1 && byte <= 0xf3) return NEED3;
      if (byte === 0xf4) return AFTER_F4;
      return INVALID;
    case NEED1:
      return cont ? START : INVALID;
    case NEED2:
      return cont ? NEED1 : INVALID;
    case NEED3:
      return cont ? NEED2 : INVALID;
    case AFTER_E0:
      return byte >= 0xa0 && byte <= 0xbf ? NEED1 : INVALID;
    case AFTER_ED:
      return byte >= 0x80 && byte <= 0x9f ? NEED1 : INVALID;
    case AFTER_F0:
      return byte >= 0x90 && byte <= 0xbf ? NEED2 : INVALID;
    case AFTER_F4:
      return byte >= 0x80 && byte <= 0x8f ? NEED2 : INVALID;
    default:
      return INVALID;
  }
}

/**
 * Per decoder state, the tokens that keep the output valid UTF-8 (a token that is not text, a
 * stop token included, only between characters), and each token's successor state.
 */
export class Utf8Masks {
  /** masks[state]: the tokens valid in that state. */
  readonly #masks: TokenBitmask[];
  /** next[state * size + token]: the state after the token, -1 when invalid. */
  readonly #next: Int8Array;
  readonly #size: number;

  constructor(vocab: TokenVocabulary) {
    const size = vocab.size;
    this.#size = size;
    const words = bitmaskWords(size);
    this.#masks = Array.from({ length: STATES }, () => new Int32Array(words));
    this.#next = new Int8Array(STATES * size).fill(INVALID);
    for (let t = 0; t < size; t++) {
      const bytes = vocab.tokens[t];
      for (let s = 0; s < STATES; s++) {
        let state = s;
        if (bytes === null || bytes === undefined) {
          state = s === START ? START : INVALID;
        } else {
          for (let i = 0; i < bytes.length && state !== INVALID; i++)
            state = step(state, bytes[i]!);
        }
        this.#next[s * size + t] = state;
        if (state !== INVALID) {
          const mask = this.#masks[s]!;
          mask[t >>> 5] = mask[t >>> 5]! | (1 << (t & 31));
        }
      }
    }
  }

  /** The state before any token. */
  static readonly start = START;

  /** The decoder state after `token` in `state`, or -1 when the token breaks UTF-8 there. */
  next(state: number, token: number): number {
    return this.#next[state * this.#size + token]!;
  }

  /** Clears, in `mask`, every token that is not valid UTF-8 in `state`. */
  intersect(mask: TokenBitmask, state: number): void {
    const valid = this.#masks[state]!;
    const n = Math.min(mask.length, valid.length);
    for (let w = 0; w < n; w++) mask[w] = mask[w]! & valid[w]!;
  }
}
