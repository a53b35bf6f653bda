/** What {@link StopStringMatcher.push} returns for one piece of generated text. */
export interface StopMatchResult {
  /** Text that can safely be sent to the client now (never part of a stop string). */
  readonly text: string;
  /** True once a stop string has completed; later pushes return empty text. */
  readonly stopped: boolean;
  /** The stop string that matched, when `stopped` became true on this push. */
  readonly matched?: string;
}

/**
 * Finds stop strings in streamed text that arrives in arbitrary pieces (tokens), so that a stop
 * string split across token boundaries is still caught, and the stop string itself is never
 * emitted.
 *
 * Semantics: generation stops at the first point in the text where some stop string has been
 * completely produced (the smallest end position); among stop strings ending there, the longest
 * wins. Everything before that stop string's start is emitted, nothing from it on.
 *
 * To achieve this while streaming, the matcher holds back the longest suffix of the text seen so
 * far that is a proper prefix of a stop string: those characters may still turn out to begin a
 * stop string. Any character before that suffix can never be part of a match, so it is emitted.
 * Call {@link flush} when generation ends for another reason to release the held-back text.
 *
 * @example
 * ```ts
 * const m = new StopStringMatcher(['\n\nUser:']);
 * m.push('Hi!\n');        // { text: 'Hi!', stopped: false }   ('\n' is held back)
 * m.push('\nUs');         // { text: '', stopped: false }
 * m.push('er: more');     // { text: '', stopped: true, matched: '\n\nUser:' }
 * ```
 */
export class StopStringMatcher {
  readonly #stops: readonly string[];
  readonly #maxLen: number;
  #held = '';
  #stopped = false;

  /**
   * @param stops the stop strings; empty strings are ignored.
   */
  constructor(stops: readonly string[]) {
    this.#stops = stops.filter((s) => s.length > 0);
    this.#maxLen = this.#stops.reduce((m, s) => Math.max(m, s.length), 0);
  }

  /** True once a stop string has matched. */
  get stopped(): boolean {
    return this.#stopped;
  }

  /** Number of characters currently held back (could begin a stop string). */
  get heldLength(): number {
    return this.#held.length;
  }

  /** Feeds the next piece of generated text. */
  push(piece: string): StopMatchResult {
    if (this.#stopped) return { text: '', stopped: true };
    if (this.#stops.length === 0) return { text: piece, stopped: false };
    const buffer = this.#held + piece;

    // Earliest end wins; for equal ends the longest (earliest start) stop string wins. The held
    // part never contains a complete stop string and emitted text can never start one, so
    // searching the buffer alone is enough.
    let bestEnd = Number.POSITIVE_INFINITY;
    let bestStart = 0;
    let bestStop: string | undefined;
    for (const stop of this.#stops) {
      const at = buffer.indexOf(stop);
      if (at < 0) continue;
      const end = at + stop.length;
      if (end < bestEnd || (end === bestEnd && at < bestStart)) {
        bestEnd = end;
        bestStart = at;
        bestStop = stop;
      }
    }
    if (bestStop !== undefined) {
      this.#stopped = true;
      this.#held = '';
      return { text: buffer.slice(0, bestStart), stopped: true, matched: bestStop };
    }

    const hold = this.#longestStopPrefixSuffix(buffer);
    this.#held = buffer.slice(buffer.length - hold);
    return { text: buffer.slice(0, buffer.length - hold), stopped: false };
  }

  /** Releases held-back text when generation ended without a stop string. */
  flush(): string {
    const out = this.#stopped ? '' : this.#held;
    this.#held = '';
    return out;
  }

  #longestStopPrefixSuffix(buffer: string): number {
    const limit = Math.min(buffer.length, this.#maxLen - 1);
    for (let len = limit; len > 0; len--) {
      const suffix = buffer.slice(buffer.length - len);
      for (const stop of this.#stops) {
        if (stop.length > len && stop.startsWith(suffix)) return len;
      }
    }
    return 0;
  }
}
