import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { decodeFrame, encodeFrame } from './frame';
import { block, key, NS, OTHER_NS, sameBytes } from './testing/fixtures';

describe('frame', () => {
  it('round-trips a payload and returns a view, not a copy', () => {
    const payload = block(1, 5000);
    const frame = encodeFrame(NS, key(1), payload);
    const d = decodeFrame(frame, NS, key(1));
    expect(d.ok).toBe(true);
    if (!d.ok) return;
    expect(sameBytes(d.payload, payload)).toBe(true);
    expect(d.payload.buffer).toBe(frame.buffer);
  });

  it('detects any single flipped bit (property)', () => {
    const payload = block(2, 700);
    const frame = encodeFrame(NS, key(2), payload);
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: frame.length - 1 }),
        fc.integer({ min: 0, max: 7 }),
        (at, bit) => {
          const bad = Buffer.from(frame);
          bad[at] = (bad[at] ?? 0) ^ (1 << bit);
          return !decodeFrame(bad, NS, key(2)).ok;
        },
      ),
      { numRuns: 500 },
    );
  });

  it('detects every truncation and trailing garbage', () => {
    const frame = encodeFrame(NS, key(3), block(3, 300));
    for (let len = 0; len < frame.length; len++) {
      expect(decodeFrame(frame.subarray(0, len), NS, key(3)).ok).toBe(false);
    }
    expect(decodeFrame(Buffer.concat([frame, Buffer.from([0])]), NS, key(3)).ok).toBe(false);
  });

  it('refuses a frame of another namespace or key as foreign', () => {
    const frame = encodeFrame(OTHER_NS, key(4), block(4, 64));
    expect(decodeFrame(frame, NS, key(4))).toEqual({ ok: false, fault: 'foreign' });
    expect(decodeFrame(encodeFrame(NS, key(5), block(4, 64)), NS, key(4))).toEqual({
      ok: false,
      fault: 'foreign',
    });
  });

  it('refuses bytes that are not a frame at all', () => {
    expect(decodeFrame(Buffer.from('hello world, this is not a frame'), NS, key(1)).ok).toBe(false);
    expect(decodeFrame(new Uint8Array(0), NS, key(1)).ok).toBe(false);
  });
});
