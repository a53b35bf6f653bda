import { f16BitsToF32, f32ToF16Bits, roundToF16 } from '@kvasir/quantizer';
import { randomFloats, seededRandom } from '@kvasir/test-utils';
import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import { kRowOffset, kvCacheLayout, vRowOffset } from '../layout.js';
import { releaseTestGpu, testGpu } from '../testing/gpu.js';
import { f16Format, f16UnpackWgsl, f32Format } from './float.js';
import { kvFormat } from './registry.js';

afterAll(releaseTestGpu);

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);
const bitsOf = (x: number): number => {
  f32[0] = x;
  return u32[0]!;
};
const fromBits = (b: number): number => {
  u32[0] = b >>> 0;
  return f32[0]!;
};

/** Every finite f16 value's neighbourhood: midpoints to the next value, and one f32 ulp around. */
function roundingProbes(): number[] {
  const probes: number[] = [];
  for (let h = 0; h < 0x7bff; h++) {
    const lo = f16BitsToF32(h);
    const hi = f16BitsToF32(h + 1);
    const mid = (lo + hi) / 2;
    for (const x of [lo, mid, fromBits(bitsOf(mid) + 1), fromBits(bitsOf(mid) - 1)]) {
      probes.push(x, -x);
    }
  }
  return probes;
}

describe('f16 conversion', () => {
  it('round-trips every finite and infinite f16', () => {
    const bad: number[] = [];
    for (let h = 0; h < 0x10000; h++) {
      const exp = (h >>> 10) & 0x1f;
      if (exp === 0x1f && (h & 0x3ff) !== 0) continue;
      if (f32ToF16Bits(f16BitsToF32(h)) !== h) bad.push(h);
    }
    expect(bad).toEqual([]);
  });

  it('rounds to nearest, ties to even, subnormals included', () => {
    const bad: number[] = [];
    for (let h = 0; h < 0x7bff; h++) {
      const lo = f16BitsToF32(h);
      const hi = f16BitsToF32(h + 1);
      const mid = (lo + hi) / 2;
      if (f32ToF16Bits(mid) !== (h % 2 === 0 ? h : h + 1)) bad.push(h);
      if (f32ToF16Bits(fromBits(bitsOf(mid) + 1)) !== h + 1) bad.push(h);
      if (f32ToF16Bits(fromBits(bitsOf(mid) - 1)) !== h) bad.push(h);
    }
    expect(bad).toEqual([]);
  });

  it('handles overflow, underflow, signed zero and NaN', () => {
    expect(f32ToF16Bits(65504)).toBe(0x7bff);
    expect(f32ToF16Bits(65519.99)).toBe(0x7bff);
    expect(f32ToF16Bits(65520)).toBe(0x7c00);
    expect(f32ToF16Bits(1e10)).toBe(0x7c00);
    expect(f32ToF16Bits(-1e10)).toBe(0xfc00);
    expect(f32ToF16Bits(2 ** -25)).toBe(0); // exactly half the smallest subnormal: ties to even 0
    expect(f32ToF16Bits(2 ** -25 * 1.0001)).toBe(1);
    expect(f32ToF16Bits(-0)).toBe(0x8000);
    expect(f32ToF16Bits(1e-30)).toBe(0);
    expect(Number.isNaN(f16BitsToF32(f32ToF16Bits(Number.NaN)))).toBe(true);
  });

  it('is monotonic and within half an f16 ulp (property)', () => {
    fc.assert(
      fc.property(fc.float({ min: -65504, max: 65504, noNaN: true }), (x) => {
        const r = roundToF16(x);
        const h = f32ToF16Bits(Math.abs(x)) & 0x7fff;
        const ulp = h === 0 ? 2 ** -24 : f16BitsToF32(h + 1) - f16BitsToF32(h);
        expect(Math.abs(r - Math.fround(x))).toBeLessThanOrEqual(ulp / 2 + 1e-45);
      }),
    );
  });

  it('matches the GPU pack2x16float and unpack2x16float bit for bit', async () => {
    const gpu = await testGpu();
    const probes = roundingProbes();
    if (probes.length % 2 === 1) probes.push(0);
    const input = new Float32Array(probes);
    const code = /* wgsl */ `
@group(0) @binding(0) var<storage, read> x: array<vec2<f32>>;
@group(0) @binding(1) var<storage, read_write> packed: array<u32>;
@group(0) @binding(2) var<storage, read_write> unpacked: array<vec2<f32>>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3<u32>, @builtin(num_workgroups) n: vec3<u32>) {
  let i = g.y * n.x * 64u + g.x;
  if (i >= arrayLength(&x)) { return; }
  packed[i] = pack2x16float(x[i]);
  // Every f16 bit pattern below 0x7c00, in both halves.
  let h = (i % 0x7c00u);
  unpacked[i] = unpack2x16float(h | ((0x7bffu - h) << 16u));
}`;
    const pipeline = await gpu.pipeline({ code, label: 'f16-probe' });
    const n = input.length / 2;
    const xb = gpu.storageBuffer(input);
    const pb = gpu.storageBuffer(n * 4);
    const ub = gpu.storageBuffer(n * 8);
    const wg = Math.ceil(n / 64);
    const x = Math.min(wg, 65535);
    await gpu.runDispatch(pipeline, [xb, pb, ub], [x, Math.ceil(wg / x)]);
    const packed = new Uint32Array(await gpu.readBuffer(pb));
    const unpacked = new Float32Array(await gpu.readBuffer(ub));
    let mismatches = 0;
    for (let i = 0; i < n; i++) {
      const want = (f32ToF16Bits(input[2 * i]!) | (f32ToF16Bits(input[2 * i + 1]!) << 16)) >>> 0;
      if (packed[i] !== want) mismatches++;
      const h = i % 0x7c00;
      if (unpacked[2 * i] !== f16BitsToF32(h) || unpacked[2 * i + 1] !== f16BitsToF32(0x7bff - h)) {
        mismatches++;
      }
    }
    expect(mismatches).toBe(0);
  });

  it("widens every f16 bit pattern exactly with f16Unpack 'integer' (NaN payloads and signed zeros included)", async () => {
    const gpu = await testGpu();
    const code = /* wgsl */ `
@group(0) @binding(0) var<storage, read_write> out: array<vec4<u32>>;
${f16UnpackWgsl('integer')}
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
  // Word i of 4 holds halves 8g + 2i (low) and 8g + 2i + 1 (high): all 65,536 patterns.
  let h = 8u * g.x;
  let p = vec4<u32>(h, h + 2u, h + 4u, h + 6u) | (vec4<u32>(h + 1u, h + 3u, h + 5u, h + 7u) << vec4<u32>(16u));
  let f = kv_unpack8(p);
  out[2u * g.x] = bitcast<vec4<u32>>(f[0]);
  out[2u * g.x + 1u] = bitcast<vec4<u32>>(f[1]);
}`;
    const pipeline = await gpu.pipeline({ code, label: 'f16-integer-unpack' });
    const out = gpu.storageBuffer(65536 * 4);
    await gpu.runDispatch(pipeline, [out], 65536 / 8 / 64);
    const got = new Uint32Array(await gpu.readBuffer(out));
    const bad: string[] = [];
    for (let h = 0; h < 65536; h++) {
      const want = f16BitsToF32(h);
      const bits = got[h]!;
      // NaNs keep their payload: the half's mantissa lands in the top 10 mantissa bits.
      const ok = Number.isNaN(want)
        ? bits === (((h & 0x8000) << 16) | 0x7f800000 | ((h & 0x3ff) << 13)) >>> 0
        : bits === bitsOf(want);
      if (!ok && bad.length < 5) bad.push(`0x${h.toString(16)} -> 0x${bits.toString(16)}`);
    }
    expect(bad).toEqual([]);
  });
});

describe('formats', () => {
  it('are found by name', () => {
    expect(kvFormat('f32')).toBe(f32Format);
    expect(kvFormat('f16')).toBe(f16Format);
    expect(() => kvFormat('int3')).toThrow(expect.objectContaining({ code: 'UNSUPPORTED_FORMAT' }));
  });

  it('compute the layout of the contract', () => {
    const l = kvCacheLayout({ numKvHeads: 3, headDim: 64, blockSize: 16, format: f16Format });
    expect(l.rowWords).toBe(32);
    expect(l.slabWords).toBe(16 * 32);
    expect(l.blockWords).toBe(3 * 2 * 16 * 32);
    expect(l.bytesPerBlock).toBe(3 * 2 * 16 * 64 * 2);
    expect(kRowOffset(l, 2, 1, 5)).toBe(2 * l.blockWords + 2 * l.slabWords + 5 * 32);
    expect(vRowOffset(l, 2, 1, 5)).toBe(2 * l.blockWords + 3 * l.slabWords + 5 * 32);
    expect(() =>
      kvCacheLayout({ numKvHeads: 1, headDim: 60, blockSize: 16, format: f16Format }),
    ).toThrow(expect.objectContaining({ code: 'UNSUPPORTED_HEAD_DIM' }));
    expect(() =>
      kvCacheLayout({ numKvHeads: 0, headDim: 64, blockSize: 16, format: f32Format }),
    ).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
  });

  for (const format of [f32Format, f16Format]) {
    it(`${format.name}: CPU rows round-trip (exactly for f32, through f16 rounding for f16)`, () => {
      const rng = seededRandom(7);
      const layout = kvCacheLayout({ numKvHeads: 2, headDim: 80, blockSize: 8, format });
      const cache = new Uint32Array(layout.blockWords * 2);
      const row = randomFloats(rng, 80, 3);
      const slab = layout.blockWords + layout.slabWords;
      format.encodeRow(cache, slab, 5, row, 8);
      const out = new Float32Array(80);
      format.decodeRow(cache, slab, 5, out, 8);
      const want = format === f16Format ? row.map(roundToF16) : row;
      expect(out).toEqual(want);
      // Only that row's words were written.
      let written = 0;
      for (let i = 0; i < cache.length; i++) if (cache[i] !== 0) written++;
      expect(written).toBeLessThanOrEqual(layout.rowWords);
    });

    it(`${format.name}: WGSL store and load agree with the CPU codec`, async () => {
      const gpu = await testGpu();
      const headDim = 96;
      const rows = 6;
      const rw = format.rowWords(headDim);
      const rng = seededRandom(11);
      const src = randomFloats(rng, rows * headDim, 10);
      const store = /* wgsl */ `
@group(0) @binding(0) var<storage, read> src: array<f32>;
@group(0) @binding(1) var<storage, read_write> kv: array<u32>;
var<private> row: u32;
fn kv_src(e: u32) -> f32 { return src[row * ${headDim}u + e]; }
${format.wgslStore({ headDim, blockSize: rows, cacheVar: 'kv', cacheElement: 'u32' })}
@compute @workgroup_size(1)
fn main(@builtin(workgroup_id) w: vec3<u32>) {
  row = w.x;
  for (var c = 0u; c < ${headDim}u / KV_STORE_CHUNK; c++) { kv_store_chunk(0u, row, c, 1.0); }
}`;
      const load = /* wgsl */ `
@group(0) @binding(0) var<storage, read> kv: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read_write> out8: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> out4: array<vec4<f32>>;
${format.wgslLoad({ headDim, blockSize: rows, cacheVar: 'kv' })}
@compute @workgroup_size(1)
fn main(@builtin(workgroup_id) w: vec3<u32>) {
  for (var c = 0u; c < ${headDim / 8}u; c++) {
    let v = kv_load8(0u, w.x, c);
    out8[(w.x * ${headDim}u + 8u * c) / 4u] = v[0];
    out8[(w.x * ${headDim}u + 8u * c) / 4u + 1u] = v[1];
  }
  for (var q = 0u; q < ${headDim / 4}u; q++) { out4[(w.x * ${headDim}u) / 4u + q] = kv_load4(0u, w.x, q); }
}`;
      const kv = gpu.storageBuffer(rows * rw * 4);
      await gpu.runDispatch(
        await gpu.pipeline({ code: store }),
        [gpu.storageBuffer(src), kv],
        rows,
      );
      const out8 = gpu.storageBuffer(rows * headDim * 4);
      const out4 = gpu.storageBuffer(rows * headDim * 4);
      await gpu.runDispatch(await gpu.pipeline({ code: load }), [kv, out8, out4], rows);
      const cpu = new Uint32Array(rows * rw);
      const decoded = new Float32Array(rows * headDim);
      for (let t = 0; t < rows; t++) {
        format.encodeRow(cpu, 0, t, src.subarray(t * headDim, (t + 1) * headDim), rows);
        format.decodeRow(cpu, 0, t, decoded.subarray(t * headDim, (t + 1) * headDim), rows);
      }
      expect(new Uint32Array(await gpu.readBuffer(kv))).toEqual(cpu);
      expect(new Float32Array(await gpu.readBuffer(out8))).toEqual(decoded);
      expect(new Float32Array(await gpu.readBuffer(out4))).toEqual(decoded);
    });
  }
});
