import type { ChoiceDelta, FinishReason, TokenLogprob } from './engine.js';
import { StopStringMatcher } from './stop-matcher.js';

/** A token's log-probability with its character offset in the choice's text. */
export interface PlacedLogprob {
  readonly logprob: TokenLogprob;
  readonly textOffset: number;
}

/** What one choice adds to the response after an engine delta. */
export interface ChoiceEmission {
  readonly text: string;
  readonly logprobs: readonly PlacedLogprob[];
  /** Set when the choice has just ended. */
  readonly finishReason?: FinishReason;
  /** True when the end came from a stop string (the engine must be told to stop the choice). */
  readonly stoppedByString: boolean;
}

interface Unit {
  start: number;
  end: number;
  logprobs: readonly TokenLogprob[];
}

/**
 * Turns one choice's engine deltas into what the client sees: stop strings applied across token
 * boundaries (text that might begin a stop string is held back), and log-probabilities released
 * together with the text they belong to, so that tokens after a stop string never appear.
 */
export class ChoiceOutput {
  readonly #matcher: StopStringMatcher;
  readonly #units: Unit[] = [];
  #received = 0;
  #released = 0;
  #done = false;
  /** Tokens the engine generated for this choice (including any after a stop string). */
  tokenCount = 0;
  /** The finish reason once the choice has ended. */
  finishReason: FinishReason | undefined;

  constructor(stops: readonly string[]) {
    this.#matcher = new StopStringMatcher(stops);
  }

  /** True once the choice has ended (by the engine or by a stop string). */
  get done(): boolean {
    return this.#done;
  }

  /** Applies one engine delta; returns what to send, or `undefined` when nothing changed. */
  push(delta: ChoiceDelta): ChoiceEmission | undefined {
    this.tokenCount += delta.tokenIds.length;
    if (this.#done) return undefined;
    const start = this.#received;
    this.#received += delta.text.length;
    this.#units.push({ start, end: this.#received, logprobs: delta.logprobs ?? [] });

    const result = this.#matcher.push(delta.text);
    let text = result.text;
    let finishReason: FinishReason | undefined;
    if (result.stopped) {
      finishReason = 'stop';
    } else if (delta.finishReason !== undefined) {
      text += this.#matcher.flush();
      finishReason = delta.finishReason;
    }
    this.#released += text.length;
    const logprobs = this.#release(finishReason !== undefined, result.stopped);
    if (finishReason !== undefined) {
      this.#done = true;
      this.finishReason = finishReason;
    }
    if (text === '' && logprobs.length === 0 && finishReason === undefined) return undefined;
    return {
      text,
      logprobs,
      stoppedByString: result.stopped,
      ...(finishReason === undefined ? {} : { finishReason }),
    };
  }

  /** Ends the choice from outside (request aborted); releases nothing further. */
  abort(): void {
    if (this.#done) return;
    this.#done = true;
    this.finishReason = 'abort';
  }

  #release(final: boolean, stopped: boolean): PlacedLogprob[] {
    const out: PlacedLogprob[] = [];
    while (this.#units.length > 0) {
      const unit = this.#units[0]!;
      // After a stop string, only tokens that contributed text before it are kept; otherwise a
      // token is released once all of its text has been released.
      const keep = stopped ? unit.start < this.#released : final || unit.end <= this.#released;
      if (!keep) break;
      this.#units.shift();
      let offset = unit.start;
      for (const lp of unit.logprobs) {
        out.push({ logprob: lp, textOffset: Math.min(offset, this.#released) });
        offset += lp.token.length;
      }
    }
    if (stopped) this.#units.length = 0;
    return out;
  }
}
