// XXH64 (Yann Collet's xxHash, 64-bit), written here: the stripe loop, which touches every byte,
// runs as a tiny hand-assembled WebAssembly function with native 64-bit multiplies; the few
// per-value steps (seeding, merge, tail, avalanche) run in JavaScript with BigInt.

const M64 = (1n << 64n) - 1n;
const P1 = 0x9e3779b185ebca87n;
const P2 = 0xc2b2ae3d27d4eb4fn;
const P3 = 0x165667b19e3779f9n;
const P4 = 0x85ebca77c2b2ae63n;
const P5 = 0x27d4eb2f165667c5n;

/** Signed LEB128 of a 64-bit two's-complement value. */
function sleb64(v: bigint): number[] {
  let x = BigInt.asIntN(64, v);
  const out: number[] = [];
  for (;;) {
    const byte = Number(x & 0x7fn);
    x >>= 7n;
    const done = (x === 0n && (byte & 0x40) === 0) || (x === -1n && (byte & 0x40) !== 0);
    out.push(done ? byte : byte | 0x80);
    if (done) return out;
  }
}

function section(id: number, body: number[]): number[] {
  return [id, ...uleb(body.length), ...body];
}

function uleb(n: number): number[] {
  const out: number[] = [];
  do {
    let b = n & 0x7f;
    n >>>= 7;
    if (n !== 0) b |= 0x80;
    out.push(b);
  } while (n !== 0);
  return out;
}

/**
 * `stripes(p, end)`: v1..v4 (u64 at memory offsets 0, 8, 16, 24) absorb the 32-byte stripes in
 * [p, end): v = rotl(v + lane * P2, 31) * P1 for each of the four lanes.
 */
function buildModule(): Uint8Array {
  const I64_LOAD = 0x29;
  const I64_STORE = 0x37;
  const lane = (local: number, offset: number): number[] => [
    0x20,
    local, // local.get v
    0x20,
    0, // local.get p
    I64_LOAD,
    3,
    ...uleb(offset),
    0x42,
    ...sleb64(P2),
    0x7e, // i64.const P2; i64.mul
    0x7c, // i64.add
    0x42,
    31,
    0x89, // i64.const 31; i64.rotl
    0x42,
    ...sleb64(P1),
    0x7e, // i64.const P1; i64.mul
    0x21,
    local, // local.set v
  ];
  const code = [
    1,
    4,
    0x7e, // locals: 4 × i64 (v1..v4 = locals 2..5)
    ...[0, 8, 16, 24].flatMap((off, i) => [0x41, 0, I64_LOAD, 3, ...uleb(off), 0x21, 2 + i]),
    0x02,
    0x40, // block
    0x03,
    0x40, // loop
    0x20,
    0,
    0x20,
    1,
    0x4f,
    0x0d,
    1, // if p >= end: break
    ...lane(2, 0),
    ...lane(3, 8),
    ...lane(4, 16),
    ...lane(5, 24),
    0x20,
    0,
    0x41,
    32,
    0x6a,
    0x21,
    0, // p += 32
    0x0c,
    0, // continue
    0x0b, // end loop
    0x0b, // end block
    ...[0, 8, 16, 24].flatMap((off, i) => [0x41, 0, 0x20, 2 + i, I64_STORE, 3, ...uleb(off)]),
    0x0b, // end function
  ];
  const name = (s: string) => [s.length, ...Array.from(s, (c) => c.charCodeAt(0))];
  return new Uint8Array([
    0x00,
    0x61,
    0x73,
    0x6d,
    0x01,
    0x00,
    0x00,
    0x00,
    ...section(1, [1, 0x60, 2, 0x7f, 0x7f, 0]), // type: (i32, i32) -> ()
    ...section(3, [1, 0]), // one function of type 0
    ...section(5, [1, 0x00, CHUNK_PAGES + 1]), // memory, min pages
    ...section(7, [2, ...name('mem'), 0x02, 0, ...name('stripes'), 0x00, 0]),
    ...section(10, [1, ...uleb(code.length), ...code]),
  ]);
}

/** Bytes hashed per call into the module: a multiple of 32, one 64 KiB page short of the memory. */
const CHUNK_PAGES = 16;
/** Bytes copied into the module's memory per `stripes` call. */
export const XXH64_CHUNK = CHUNK_PAGES * 65536;
/** Where data starts in the module's memory (after the first page; the state is at 0..31). */
export const XXH64_DATA = 65536;
const CHUNK = XXH64_CHUNK;
const DATA = XXH64_DATA;

let moduleBytes: Uint8Array | undefined;
/**
 * The stripe loop's WebAssembly module, as bytes (for worker threads, which instantiate their
 * own copy): exports `mem` (state v1..v4 as u64 at 0..31, data from {@link XXH64_DATA}) and
 * `stripes(p, end)`.
 */
export function xxh64WasmBytes(): Uint8Array {
  moduleBytes ??= buildModule();
  return moduleBytes;
}

interface Hasher {
  /** The module's memory, as bytes. */
  mem: Uint8Array;
  /** v1..v4, at bytes 0..31 of the memory. */
  state: BigUint64Array;
  stripes: (p: number, end: number) => void;
}

// The few WebAssembly names used here (this package compiles without the DOM library).
interface WasmApi {
  Module: new (bytes: Uint8Array) => object;
  Instance: new (
    module: object,
    imports: object,
  ) => {
    exports: {
      mem: { buffer: ArrayBuffer; grow(pages: number): number };
      stripes: (p: number, end: number) => void;
    };
  };
}

let compiled: object | undefined;

/** A new instance of the stripe module, its memory grown once by `extraPages` (never again). */
function instantiate(extraPages = 0): Hasher {
  const api = (globalThis as unknown as { WebAssembly: WasmApi }).WebAssembly;
  compiled ??= new api.Module(xxh64WasmBytes());
  const exports = new api.Instance(compiled, {}).exports;
  // Growing replaces the memory's ArrayBuffer: take the views after it.
  if (extraPages > 0) exports.mem.grow(extraPages);
  return {
    mem: new Uint8Array(exports.mem.buffer),
    state: new BigUint64Array(exports.mem.buffer, 0, 4),
    stripes: exports.stripes,
  };
}

let instance: Hasher | undefined;

function wasm(): Hasher {
  instance ??= instantiate();
  return instance;
}

/** Instances whose memory holds staging buffers, by that memory's ArrayBuffer. */
const staged = new WeakMap<ArrayBuffer, Hasher>();

/**
 * `count` buffers of `bytes` each, laid out `stride` bytes apart from {@link XXH64_DATA} in the
 * memory of a stripe-module instance of their own, which hashes them where they lie: no copy
 * into the module's memory first, which is half the cost of hashing an ordinary buffer. The
 * memory is sized once and never grows, so the buffers stay valid for as long as they are
 * referenced. Limits are the caller's to check (WebAssembly's 4 GiB).
 */
export function xxh64StagingBuffers(count: number, bytes: number, stride: number): Uint8Array[] {
  const total = XXH64_DATA + count * stride;
  const hasher = instantiate(Math.max(0, Math.ceil(total / 65536) - (CHUNK_PAGES + 1)));
  const buffer = hasher.mem.buffer as ArrayBuffer;
  staged.set(buffer, hasher);
  return Array.from(
    { length: count },
    (_, i) => new Uint8Array(buffer, XXH64_DATA + i * stride, bytes),
  );
}

/** The instance that hashes `data` in place, when `data` lies in staging memory past the state. */
export function xxh64InPlace(data: Uint8Array): Hasher | undefined {
  const hasher = staged.get(data.buffer as ArrayBuffer);
  return hasher !== undefined && data.byteOffset >= XXH64_DATA ? hasher : undefined;
}

const rotl = (x: bigint, r: bigint): bigint => ((x << r) | (x >> (64n - r))) & M64;
const mul = (a: bigint, b: bigint): bigint => (a * b) & M64;
const round = (acc: bigint, lane: bigint): bigint =>
  mul(rotl((acc + mul(lane, P2)) & M64, 31n), P1);
const merge = (h: bigint, v: bigint): bigint => (mul(h ^ round(0n, v), P1) + P4) & M64;

/** The four lane accumulators after the 32-byte stripes of a value (v1..v4). */
export type Xxh64Lanes = readonly [bigint, bigint, bigint, bigint];

/** The lanes' starting values for `seed`, before any stripe. */
export function xxh64InitLanes(seed = 0n): Xxh64Lanes {
  const s = BigInt.asUintN(64, seed);
  return [(s + P1 + P2) & M64, (s + P2) & M64, s, (s - P1) & M64];
}

/**
 * The stripe pass (every byte of the first `len - len % 32`), on this thread. This is the part
 * of XXH64 that touches the whole value; a worker thread can run it instead (same module) and
 * hand the lanes to {@link xxh64Finish}.
 */
export function xxh64Lanes(data: Uint8Array, seed = 0n): Xxh64Lanes {
  const inPlace = xxh64InPlace(data);
  const w = inPlace ?? wasm();
  const init = xxh64InitLanes(seed);
  for (let i = 0; i < 4; i++) w.state[i] = init[i]!;
  const body = data.byteLength - (data.byteLength % 32);
  if (inPlace !== undefined) inPlace.stripes(data.byteOffset, data.byteOffset + body);
  else {
    // The module sees only its own memory: copy in a chunk at a time (a copy runs at memory speed).
    for (let p = 0; p < body; ) {
      const n = Math.min(CHUNK, body - p);
      w.mem.set(data.subarray(p, p + n), DATA);
      w.stripes(DATA, DATA + n);
      p += n;
    }
  }
  return [w.state[0]!, w.state[1]!, w.state[2]!, w.state[3]!];
}

/**
 * XXH64 of `data` from the lanes of its stripe pass (ignored, and may be omitted, when `data`
 * is shorter than 32 bytes): merge, the tail of fewer than 32 bytes, and the avalanche.
 */
export function xxh64Finish(data: Uint8Array, seed: bigint, lanes?: Xxh64Lanes): bigint {
  const len = data.byteLength;
  const s = BigInt.asUintN(64, seed);
  let h: bigint;
  let p = 0;
  if (len >= 32) {
    if (lanes === undefined)
      throw new RangeError('xxh64Finish: lanes required for 32 bytes or more');
    const [v1, v2, v3, v4] = lanes;
    h = (rotl(v1, 1n) + rotl(v2, 7n) + rotl(v3, 12n) + rotl(v4, 18n)) & M64;
    h = merge(h, v1);
    h = merge(h, v2);
    h = merge(h, v3);
    h = merge(h, v4);
    p = len - (len % 32);
  } else {
    h = (s + P5) & M64;
  }
  h = (h + BigInt(len)) & M64;
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  while (p + 8 <= len) {
    h ^= round(0n, view.getBigUint64(p, true));
    h = (mul(rotl(h, 27n), P1) + P4) & M64;
    p += 8;
  }
  if (p + 4 <= len) {
    h ^= mul(BigInt(view.getUint32(p, true)), P1);
    h = (mul(rotl(h, 23n), P2) + P3) & M64;
    p += 4;
  }
  while (p < len) {
    h ^= mul(BigInt(data[p]!), P5);
    h = mul(rotl(h, 11n), P1);
    p++;
  }
  h ^= h >> 33n;
  h = mul(h, P2);
  h ^= h >> 29n;
  h = mul(h, P3);
  h ^= h >> 32n;
  return h;
}

/** XXH64 of `data` with `seed` (default 0), as a BigInt. */
export function xxh64(data: Uint8Array, seed = 0n): bigint {
  return xxh64Finish(data, seed, data.byteLength >= 32 ? xxh64Lanes(data, seed) : undefined);
}
