import { Packr } from 'msgpackr';
import { xxh64 } from './xxh64';

/** Magic string in every frame header. */
export const FRAME_MAGIC = 'KVSR';
/** Version of the frame layout (header fields and their meaning). */
export const FRAME_VERSION = 1;

/** The payload checksum stored in a header: XXH64 (seed 0) as 16 lowercase hex characters. */
export function payloadChecksum(payload: Uint8Array): string {
  return xxh64(payload).toString(16).padStart(16, '0');
}

// Plain msgpack maps (no msgpackr records/extensions) so any msgpack reader can parse a header.
const packr = new Packr({ useRecords: false, moreTypes: false });

/** Fields of a frame header, as stored (msgpack map). */
export interface FrameHeader {
  readonly magic: string;
  readonly v: number;
  /** Namespace fingerprint. */
  readonly ns: string;
  /** Block hash. */
  readonly key: string;
  /** Payload length in bytes. */
  readonly len: number;
  /** XXH64 (seed 0) of the payload, 16 lowercase hex characters. */
  readonly xxh64: string;
}

/** Why a stored value was refused. */
export type FrameFault = 'truncated' | 'malformed' | 'magic' | 'version' | 'foreign' | 'checksum';

/** Result of {@link decodeFrame}. */
export type DecodedFrame =
  | { readonly ok: true; readonly payload: Uint8Array }
  | { readonly ok: false; readonly fault: FrameFault };

/**
 * Encodes the framing header of `payload`: a little-endian u16 header length, then the msgpack
 * header. The payload follows it unchanged, so writers send `[header, payload]` with `writev`
 * or one concatenation and the payload is never re-encoded.
 */
export function encodeFrameHeader(ns: string, key: string, payload: Uint8Array): Buffer {
  const header: FrameHeader = {
    magic: FRAME_MAGIC,
    v: FRAME_VERSION,
    ns,
    key,
    len: payload.byteLength,
    xxh64: payloadChecksum(payload),
  };
  const body = packr.pack(header);
  const out = Buffer.allocUnsafe(2 + body.length);
  out.writeUInt16LE(body.length, 0);
  out.set(body, 2);
  return out;
}

/** The whole frame (header then payload) in one new buffer. */
export function encodeFrame(ns: string, key: string, payload: Uint8Array): Buffer {
  return Buffer.concat([encodeFrameHeader(ns, key, payload), payload]);
}

/**
 * Parses and verifies a stored frame: magic, version, namespace, key, exact length and the
 * payload checksum. Returns a view of the payload inside `frame` (no copy) or the fault.
 */
export function decodeFrame(frame: Uint8Array, ns: string, key: string): DecodedFrame {
  if (frame.byteLength < 2) return { ok: false, fault: 'truncated' };
  const headerLen = frame[0]! | (frame[1]! << 8);
  if (frame.byteLength < 2 + headerLen) return { ok: false, fault: 'truncated' };
  let header: unknown;
  try {
    header = packr.unpack(frame.subarray(2, 2 + headerLen));
  } catch {
    return { ok: false, fault: 'malformed' };
  }
  if (typeof header !== 'object' || header === null) return { ok: false, fault: 'malformed' };
  const h = header as Partial<FrameHeader>;
  if (h.magic !== FRAME_MAGIC) return { ok: false, fault: 'magic' };
  if (h.v !== FRAME_VERSION) return { ok: false, fault: 'version' };
  if (h.ns !== ns || h.key !== key) return { ok: false, fault: 'foreign' };
  if (typeof h.len !== 'number' || typeof h.xxh64 !== 'string')
    return { ok: false, fault: 'malformed' };
  const start = 2 + headerLen;
  if (frame.byteLength - start < h.len) return { ok: false, fault: 'truncated' };
  if (frame.byteLength - start > h.len) return { ok: false, fault: 'malformed' };
  const payload = frame.subarray(start);
  if (payloadChecksum(payload) !== h.xxh64) return { ok: false, fault: 'checksum' };
  return { ok: true, payload };
}
