import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { StopStringMatcher } from './stop-strings.js';

/** Reference semantics, written as plainly as possible: stop at the first completed stop string. */
function reference(text: string, stops: readonly string[]): { text: string; stopped: boolean } {
  const live = stops.filter((s) => s.length > 0);
  for (let end = 1; end <= text.length; end++) {
    const prefix = text.slice(0, end);
    let longest = -1;
    for (const s of live) if (prefix.endsWith(s)) longest = Math.max(longest, s.length);
    if (longest >= 0) return { text: text.slice(0, end - longest), stopped: true };
  }
  return { text, stopped: false };
}

function splitAt(text: string, cuts: readonly number[]): string[] {
  const points = [...new Set(cuts.map((c) => c % (text.length + 1)))].sort((a, b) => a - b);
  const pieces: string[] = [];
  let last = 0;
  for (const p of points) {
    pieces.push(text.slice(last, p));
    last = p;
  }
  pieces.push(text.slice(last));
  return pieces;
}

function run(pieces: readonly string[], stops: readonly string[]) {
  const m = new StopStringMatcher(stops);
  let out = '';
  let stopped = false;
  for (const piece of pieces) {
    const r = m.push(piece);
    out += r.text;
    if (r.stopped) {
      stopped = true;
      break;
    }
  }
  if (!stopped) out += m.flush();
  return { text: out, stopped };
}

const alphabet = fc.constantFrom('a', 'b', 'c', ' ', '\n');
const smallString = (min: number, max: number) =>
  fc.array(alphabet, { minLength: min, maxLength: max }).map((cs) => cs.join(''));

describe('StopStringMatcher', () => {
  it('catches a stop string split across pieces and never emits it', () => {
    const m = new StopStringMatcher(['\n\nUser:']);
    expect(m.push('Hi!\n')).toEqual({ text: 'Hi!', stopped: false });
    expect(m.push('\nUs')).toEqual({ text: '', stopped: false });
    expect(m.push('er: more')).toEqual({ text: '', stopped: true, matched: '\n\nUser:' });
    expect(m.push('anything')).toEqual({ text: '', stopped: true });
  });

  it('releases held-back text when the prefix turns out not to be a stop', () => {
    const m = new StopStringMatcher(['STOP']);
    expect(m.push('ab ST')).toEqual({ text: 'ab ', stopped: false });
    expect(m.push('OP?')).toEqual({ text: '', stopped: true, matched: 'STOP' });
    const n = new StopStringMatcher(['STOP']);
    expect(n.push('ST')).toEqual({ text: '', stopped: false });
    expect(n.push('ART')).toEqual({ text: 'START', stopped: false });
    expect(n.push('S')).toEqual({ text: '', stopped: false });
    expect(n.flush()).toBe('S');
  });

  it('prefers the stop string that completes first, then the longest', () => {
    expect(run(['xabcd'], ['bcd', 'ab'])).toEqual({ text: 'x', stopped: true });
    expect(run(['xab', 'cd'], ['abcd', 'cd'])).toEqual({ text: 'x', stopped: true });
    expect(run(['xa', 'bcd'], ['bc', 'abcd'])).toEqual({ text: 'xa', stopped: true });
  });

  it('passes text through untouched without stop strings', () => {
    const m = new StopStringMatcher(['']);
    expect(m.push('abc')).toEqual({ text: 'abc', stopped: false });
    expect(m.heldLength).toBe(0);
  });

  it('matches the reference for any text, stops and token boundaries', () => {
    fc.assert(
      fc.property(
        smallString(0, 40),
        fc.array(smallString(1, 4), { minLength: 1, maxLength: 3 }),
        fc.array(fc.nat(), { maxLength: 20 }),
        (text, stops, cuts) => {
          expect(run(splitAt(text, cuts), stops)).toEqual(reference(text, stops));
        },
      ),
      { numRuns: 2000 },
    );
  });

  it('never emits text that is not part of the final answer and holds back less than a stop', () => {
    fc.assert(
      fc.property(
        smallString(0, 40),
        fc.array(smallString(1, 5), { minLength: 1, maxLength: 3 }),
        fc.array(fc.nat(), { maxLength: 20 }),
        (text, stops, cuts) => {
          const expected = reference(text, stops).text;
          const longest = Math.max(...stops.map((s) => s.length));
          const m = new StopStringMatcher(stops);
          let out = '';
          for (const piece of splitAt(text, cuts)) {
            const r = m.push(piece);
            out += r.text;
            expect(expected.startsWith(out)).toBe(true);
            expect(m.heldLength).toBeLessThan(longest);
            if (r.stopped) break;
          }
        },
      ),
      { numRuns: 1000 },
    );
  });
});
