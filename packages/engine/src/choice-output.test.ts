import { describe, expect, it } from 'vitest';
import { ChoiceOutput, type DecodedPiece } from './choice-output.js';

const tok = (text: string, extra: Partial<DecodedPiece> = {}): DecodedPiece => ({
  text,
  logprobs: [{ tokenId: 1, token: text, logprob: -1, top: [] }],
  ...extra,
});

describe('ChoiceOutput', () => {
  it('releases a token log-probability only with all of its text, placed at its offset', () => {
    const out = new ChoiceOutput(['xyz']);
    const a = out.push(tok('abx'));
    expect(a.text).toBe('ab');
    expect(a.logprobs).toEqual([]);
    const b = out.push(tok('yq'));
    expect(b.text).toBe('xyq');
    expect(b.logprobs.map((p) => [p.token, p.textOffset])).toEqual([
      ['abx', 0],
      ['yq', 3],
    ]);
  });

  it('ends at a stop string, drops the tokens after it and ignores later pieces', () => {
    const out = new ChoiceOutput(['STOP']);
    out.push(tok('ab'));
    const e = out.push(tok('cS'));
    expect(e.text).toBe('c');
    const s = out.push(tok('TOP'));
    expect(s).toMatchObject({ text: '', finishReason: 'stop', stoppedByString: true });
    expect(s.logprobs.map((p) => [p.token, p.textOffset])).toEqual([['cS', 2]]);
    expect(out.push(tok('late'))).toEqual({ text: '', logprobs: [], stoppedByString: false });
    expect(out.done).toBe(true);
  });

  it('flushes held-back text when the engine finishes the choice', () => {
    const out = new ChoiceOutput(['STOP']);
    expect(out.push(tok('xST')).text).toBe('x');
    const end = out.push(tok('', { finishReason: 'length' }));
    expect(end).toMatchObject({ text: 'ST', finishReason: 'length', stoppedByString: false });
    expect(end.logprobs.map((p) => p.token)).toEqual(['xST', '']);
  });

  it('passes text and log-probabilities straight through without stop strings', () => {
    const out = new ChoiceOutput([]);
    for (const [i, piece] of ['a', '', 'bc'].entries()) {
      const e = out.push(tok(piece));
      expect(e.text).toBe(piece);
      expect(e.logprobs.map((p) => p.textOffset)).toEqual([[0, 1, 1][i]]);
    }
  });
});
