// Portable (Node and browsers): Uint8Array and DataView, no Buffer, no node: modules.
import { crc32 } from './crc32.js';
import { xxh64 } from './xxh64.js';

/** Magic string at the start of every frame. */
export const FRAME_MAGIC = 'KVSR';
/**
 * Version of the frame layout (header fields, their meaning and the payload checksum, XXH64).
 * Version 1 was a length-prefixed msgpack header; its frames are refused with fault `version`.
 */
export const FRAME_VERSION = 2;
/** Bytes of a version-2 frame header; the payload starts at this offset. */
export const FRAME_HEADER_BYTES = 64;

// Header layout (all integers little-endian). A fixed size lets a reader split a file into
// header and payload in one `readv`, straight into a payload buffer of exactly the block's size.
const MAGIC_AT = 0; // 4 bytes "KVSR"
const VERSION_AT = 4; // u16
const HEADER_LEN_AT = 6; // u16, = FRAME_HEADER_BYTES
const LEN_AT = 8; // u64 payload bytes (below 2^53)
const NS_AT = 16; // 16 bytes: namespace fingerprint
const KEY_AT = 32; // 16 bytes: block hash
const SUM_AT = 48; // u64: XXH64 (seed 0) of the payload
// 56..59 reserved, zero
const HEADER_CRC_AT = 60; // u32: CRC-32 of bytes 0..59

const MAGIC_BYTES = Uint8Array.from(FRAME_MAGIC, (c) => c.charCodeAt(0));

/** The payload checksum stored in a header: XXH64 (seed 0) as 16 lowercase hex characters. */
export function payloadChecksum(payload: Uint8Array): string {
  return xxh64(payload).toString(16).padStart(16, '0');
}

/** Fields of a frame header, as decoded. */
export interface FrameHeader {
  readonly magic: string;
  readonly v: number;
  /** Namespace fingerprint (32 lowercase hex characters). */
  readonly ns: string;
  /** Block hash (32 lowercase hex characters). */
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

/** Result of {@link checkFrameHeader}: the payload length and checksum the header promises. */
export type CheckedHeader =
  | { readonly ok: true; readonly len: number; readonly sum: bigint }
  | { readonly ok: false; readonly fault: FrameFault };

function view(b: Uint8Array): DataView {
  return new DataView(b.buffer, b.byteOffset, b.byteLength);
}

/**
 * Encodes the 64-byte header of `payload` (namespace and key are 32-hex strings). The payload
 * follows it unchanged, so writers send `[header, payload]` with `writev` or one concatenation
 * and the payload is never re-encoded. `sum` is the payload's XXH64 when the caller computed it
 * already (e.g. while the payload was being written).
 */
export function encodeFrameHeader(
  ns: string,
  key: string,
  payload: Uint8Array,
  sum: bigint = xxh64(payload),
): Uint8Array {
  const out = new Uint8Array(FRAME_HEADER_BYTES);
  const dv = view(out);
  out.set(MAGIC_BYTES, MAGIC_AT);
  dv.setUint16(VERSION_AT, FRAME_VERSION, true);
  dv.setUint16(HEADER_LEN_AT, FRAME_HEADER_BYTES, true);
  dv.setBigUint64(LEN_AT, BigInt(payload.byteLength), true);
  writeHex(out, NS_AT, ns);
  writeHex(out, KEY_AT, key);
  dv.setBigUint64(SUM_AT, sum, true);
  dv.setUint32(HEADER_CRC_AT, crc32(out.subarray(0, HEADER_CRC_AT)), true);
  return out;
}

/** The whole frame (header then payload) in one new buffer. */
export function encodeFrame(ns: string, key: string, payload: Uint8Array): Uint8Array {
  const out = new Uint8Array(FRAME_HEADER_BYTES + payload.byteLength);
  out.set(encodeFrameHeader(ns, key, payload));
  out.set(payload, FRAME_HEADER_BYTES);
  return out;
}

/** Writes 16 bytes given as 32 hex characters (as Buffer's `write(hex)`: stops at a non-hex pair). */
function writeHex(out: Uint8Array, at: number, hex: string): void {
  for (let i = 0; i < 16; i++) {
    const pair = hex.slice(2 * i, 2 * i + 2);
    if (!/^[0-9a-fA-F]{2}$/.test(pair)) return;
    out[at + i] = Number.parseInt(pair, 16);
  }
}

function readHex(b: Uint8Array, at: number): string {
  let s = '';
  for (let i = 0; i < 16; i++) s += (b[at + i] as number).toString(16).padStart(2, '0');
  return s;
}

// A version-1 frame: u16 header length, then a msgpack map (fixmap, map16 or map32 marker)
// holding the magic as a msgpack string (0xa4 "KVSR").
const V1_MAGIC = Uint8Array.from([0xa4, ...MAGIC_BYTES]);
function looksLikeVersion1(b: Uint8Array): boolean {
  if (b.byteLength < 3) return false;
  const headerLen = b[0]! | (b[1]! << 8);
  const marker = b[2]!;
  if (headerLen >= 4096 || !((marker & 0xf0) === 0x80 || marker === 0xde || marker === 0xdf)) {
    return false;
  }
  const end = Math.min(b.byteLength, 2 + headerLen) - V1_MAGIC.length;
  for (let i = 0; i <= end; i++) {
    if (V1_MAGIC.every((m, j) => b[i + j] === m)) return true;
  }
  return false;
}

function sameHex(b: Uint8Array, at: number, hex: string): boolean {
  for (let i = 0; i < 16; i++) {
    if (b[at + i] !== Number.parseInt(hex.slice(2 * i, 2 * i + 2), 16)) return false;
  }
  return true;
}

/**
 * Parses and checks a frame header (the first {@link FRAME_HEADER_BYTES} bytes or more of a
 * frame): magic, version, its own CRC-32, namespace and key. Returns the payload length and
 * XXH64 it promises, for the caller to check against the payload.
 */
export function checkFrameHeader(header: Uint8Array, ns: string, key: string): CheckedHeader {
  if (header.byteLength < FRAME_HEADER_BYTES) {
    if (looksLikeVersion1(header)) return { ok: false, fault: 'version' };
    return { ok: false, fault: 'truncated' };
  }
  for (let i = 0; i < MAGIC_BYTES.length; i++) {
    if (header[MAGIC_AT + i] !== MAGIC_BYTES[i]) {
      return { ok: false, fault: looksLikeVersion1(header) ? 'version' : 'magic' };
    }
  }
  const dv = view(header);
  if (dv.getUint16(VERSION_AT, true) !== FRAME_VERSION) return { ok: false, fault: 'version' };
  if (dv.getUint16(HEADER_LEN_AT, true) !== FRAME_HEADER_BYTES) {
    return { ok: false, fault: 'malformed' };
  }
  if (crc32(header.subarray(0, HEADER_CRC_AT)) !== dv.getUint32(HEADER_CRC_AT, true)) {
    return { ok: false, fault: 'checksum' };
  }
  if (!sameHex(header, NS_AT, ns) || !sameHex(header, KEY_AT, key)) {
    return { ok: false, fault: 'foreign' };
  }
  const len = dv.getBigUint64(LEN_AT, true);
  if (len > BigInt(Number.MAX_SAFE_INTEGER)) return { ok: false, fault: 'malformed' };
  return { ok: true, len: Number(len), sum: dv.getBigUint64(SUM_AT, true) };
}

/** Whether `payload` has the length that a checked header promised (before hashing it). */
export function payloadLengthFault(
  payload: Uint8Array,
  header: { readonly len: number },
): FrameFault | undefined {
  if (payload.byteLength < header.len) return 'truncated';
  if (payload.byteLength > header.len) return 'malformed';
  return undefined;
}

/**
 * Whether `payload` has the length and XXH64 that a checked header promised; `sum` is the
 * payload's XXH64 when the caller computed it already (e.g. on a worker thread).
 */
export function payloadMatches(
  payload: Uint8Array,
  header: { readonly len: number; readonly sum: bigint },
  sum?: bigint,
): FrameFault | undefined {
  const lengthFault = payloadLengthFault(payload, header);
  if (lengthFault !== undefined) return lengthFault;
  return (sum ?? xxh64(payload)) === header.sum ? undefined : 'checksum';
}

/** Decodes a frame header into its fields (for tools); undefined if it is not a valid header. */
export function decodeFrameHeader(header: Uint8Array): FrameHeader | undefined {
  if (header.byteLength < FRAME_HEADER_BYTES) return undefined;
  const b = header.subarray(0, FRAME_HEADER_BYTES);
  const ns = readHex(b, NS_AT);
  const key = readHex(b, KEY_AT);
  const checked = checkFrameHeader(b, ns, key);
  if (!checked.ok) return undefined;
  return {
    magic: FRAME_MAGIC,
    v: FRAME_VERSION,
    ns,
    key,
    len: checked.len,
    xxh64: checked.sum.toString(16).padStart(16, '0'),
  };
}

/**
 * Parses and verifies a stored frame: magic, version, header CRC, namespace, key, exact length
 * and the payload's XXH64. Returns a view of the payload inside `frame` (no copy) or the fault.
 */
export function decodeFrame(frame: Uint8Array, ns: string, key: string): DecodedFrame {
  const header = checkFrameHeader(frame, ns, key);
  if (!header.ok) return header;
  const payload = frame.subarray(FRAME_HEADER_BYTES);
  const fault = payloadMatches(payload, header);
  return fault === undefined ? { ok: true, payload } : { ok: false, fault };
}
