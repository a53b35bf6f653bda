import { describe, expect, it } from 'vitest';
import { ChoiceOutput } from './choice-output.js';
import type { ChoiceDelta } from './engine.js';

const tok = (text: string, extra: Partial<ChoiceDelta> = {}): ChoiceDelta => ({
  kind: 'delta',
  index: 0,
  tokenIds: [1],
  text,
  logprobs: [{ tokenId: 1, token: text, logprob: -1, top: [] }],
  ...extra,
});

describe('ChoiceOutput', () => {
  it('releases a token log-probability only with all of its text', () => {
    const out = new ChoiceOutput(['xyz']);
    const a = out.push(tok('abx'))!;
    expect(a.text).toBe('ab');
    expect(a.logprobs).toEqual([]);
    const b = out.push(tok('yq'))!;
    expect(b.text).toBe('xyq');
    expect(b.logprobs.map((p) => [p.logprob.token, p.textOffset])).toEqual([
      ['abx', 0],
      ['yq', 3],
    ]);
  });

  it('drops tokens after a stop string and counts every generated token', () => {
    const out = new ChoiceOutput(['STOP']);
    out.push(tok('ab'));
    const e = out.push(tok('cS', { tokenIds: [1, 2] }))!;
    expect(e.text).toBe('c');
    const s = out.push(tok('TOP'))!;
    expect(s).toMatchObject({ text: '', finishReason: 'stop', stoppedByString: true });
    expect(s.logprobs.map((p) => p.logprob.token)).toEqual(['cS']);
    expect(out.push(tok('late'))).toBeUndefined();
    expect(out.tokenCount).toBe(5);
    expect(out.done).toBe(true);
  });

  it('flushes held-back text when the engine finishes the choice', () => {
    const out = new ChoiceOutput(['STOP']);
    expect(out.push(tok('xST'))!.text).toBe('x');
    const end = out.push(tok('', { finishReason: 'length' }))!;
    expect(end).toMatchObject({ text: 'ST', finishReason: 'length', stoppedByString: false });
    expect(end.logprobs.map((p) => p.logprob.token)).toEqual(['xST', '']);
  });
});
