import type { FinishReason, TokenLogprob } from '@kvasir/server/spec';
import { StopStringMatcher } from './stop-strings.js';

/** A generated token's log-probability before it is placed in the text. */
export type RawLogprob = Omit<TokenLogprob, 'textOffset'>;

/** What the decoder produced for a choice: text, its tokens' log-probabilities, maybe the end. */
export interface DecodedPiece {
  readonly text: string;
  readonly logprobs?: readonly RawLogprob[];
  /** Set when the choice ends for a reason of the engine's (stop token, limit, abort). */
  readonly finishReason?: FinishReason;
}

/** What a choice's client sees after one {@link DecodedPiece}. */
export interface ChoiceEmission {
  readonly text: string;
  /** The log-probabilities released with this text, each placed at its `textOffset`. */
  readonly logprobs: readonly TokenLogprob[];
  /** Set when the choice has just ended (`stop` also when a stop string completed). */
  readonly finishReason?: FinishReason;
  /** True when the end came from a stop string: the engine stops generating the choice. */
  readonly stoppedByString: boolean;
}

interface Unit {
  start: number;
  end: number;
  logprobs: readonly RawLogprob[];
}

/**
 * The output processor of one choice: turns decoded text into what the client sees, with stop
 * strings applied across token boundaries (text that might begin a stop string is held back),
 * and log-probabilities released together with the text they belong to, so that tokens after a
 * stop string never appear.
 *
 * @example
 * ```ts
 * const out = new ChoiceOutput(['STOP']);
 * out.push({ text: 'ok S' });   // { text: 'ok ', stoppedByString: false }  ('S' held back)
 * out.push({ text: 'TOP!' });   // { text: '', finishReason: 'stop', stoppedByString: true }
 * ```
 */
export class ChoiceOutput {
  readonly #matcher: StopStringMatcher;
  readonly #units: Unit[] = [];
  #received = 0;
  #released = 0;
  #done = false;

  /** @param stops the stop strings; empty strings are ignored. */
  constructor(stops: readonly string[]) {
    this.#matcher = new StopStringMatcher(stops);
  }

  /** True once the choice has ended (by the engine or by a stop string). */
  get done(): boolean {
    return this.#done;
  }

  /** Applies one decoded piece; after the end, returns an empty emission. */
  push(piece: DecodedPiece): ChoiceEmission {
    if (this.#done) return { text: '', logprobs: [], stoppedByString: false };
    const start = this.#received;
    this.#received += piece.text.length;
    this.#units.push({ start, end: this.#received, logprobs: piece.logprobs ?? [] });

    const result = this.#matcher.push(piece.text);
    let text = result.text;
    let finishReason: FinishReason | undefined;
    if (result.stopped) {
      finishReason = 'stop';
    } else if (piece.finishReason !== undefined) {
      text += this.#matcher.flush();
      finishReason = piece.finishReason;
    }
    this.#released += text.length;
    const logprobs = this.#release(finishReason !== undefined, result.stopped);
    if (finishReason !== undefined) this.#done = true;
    return {
      text,
      logprobs,
      stoppedByString: result.stopped,
      ...(finishReason === undefined ? {} : { finishReason }),
    };
  }

  #release(final: boolean, stopped: boolean): TokenLogprob[] {
    const out: TokenLogprob[] = [];
    while (this.#units.length > 0) {
      const unit = this.#units[0]!;
      // After a stop string, only tokens that contributed text before it are kept; otherwise a
      // token is released once all of its text has been released.
      const keep = stopped ? unit.start < this.#released : final || unit.end <= this.#released;
      if (!keep) break;
      this.#units.shift();
      let offset = unit.start;
      for (const lp of unit.logprobs) {
        out.push({ ...lp, textOffset: Math.min(offset, this.#released) });
        offset += lp.token.length;
      }
    }
    if (stopped) this.#units.length = 0;
    return out;
  }
}
