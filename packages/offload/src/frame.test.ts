import { crc32 } from 'node:zlib';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  decodeFrame,
  decodeFrameHeader,
  encodeFrame,
  encodeFrameHeader,
  FRAME_HEADER_BYTES,
  FRAME_VERSION,
  payloadChecksum,
} from './frame.js';
import { block, key, NS, OTHER_NS, sameBytes, VERSION_1_FRAME } from './testing/fixtures.js';

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

  it('lays the header out as documented: 64 bytes, fields at fixed offsets, CRC-32 of bytes 0..59', () => {
    const payload = block(6, 1000);
    const h = Buffer.from(encodeFrameHeader(NS, key(6), payload));
    expect(h.byteLength).toBe(FRAME_HEADER_BYTES);
    expect(h.toString('latin1', 0, 4)).toBe('KVSR');
    expect(h.readUInt16LE(4)).toBe(FRAME_VERSION);
    expect(h.readUInt16LE(6)).toBe(64);
    expect(h.readBigUInt64LE(8)).toBe(1000n);
    expect(h.toString('hex', 16, 32)).toBe(NS);
    expect(h.toString('hex', 32, 48)).toBe(key(6));
    expect(h.readBigUInt64LE(48).toString(16).padStart(16, '0')).toBe(payloadChecksum(payload));
    expect(h.readUInt32LE(56)).toBe(0);
    expect(h.readUInt32LE(60)).toBe(crc32(h.subarray(0, 60)));
    expect(decodeFrameHeader(h)).toEqual({
      magic: 'KVSR',
      v: FRAME_VERSION,
      ns: NS,
      key: key(6),
      len: 1000,
      xxh64: payloadChecksum(payload),
    });
  });

  it('counts a flipped header bit as a checksum fault, not as another namespace', () => {
    const frame = encodeFrame(NS, key(7), block(7, 100));
    for (const at of [8, 16, 40, 50, 57, 61]) {
      const bad = Buffer.from(frame);
      bad[at] = (bad[at] ?? 0) ^ 0x01;
      expect(decodeFrame(bad, NS, key(7))).toEqual({ ok: false, fault: 'checksum' });
    }
  });

  it('refuses a version-1 frame as an old version', () => {
    const v1 = Buffer.from(VERSION_1_FRAME, 'hex');
    expect(decodeFrame(v1, NS, key(1))).toEqual({ ok: false, fault: 'version' });
    expect(decodeFrame(v1.subarray(0, 40), NS, key(1))).toEqual({ ok: false, fault: 'version' });
    expect(decodeFrameHeader(v1)).toBeUndefined();
  });

  it('refuses bytes that are not a frame at all', () => {
    expect(decodeFrame(Buffer.from('hello world, this is not a frame'), NS, key(1)).ok).toBe(false);
    expect(decodeFrame(new Uint8Array(0), NS, key(1)).ok).toBe(false);
  });
});
