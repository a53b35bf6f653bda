import { seededRandom } from '@kvasir/test-utils';
import { afterAll, describe, expect, it } from 'vitest';
import { CopyBlocks } from '../copy-blocks/copy-blocks.js';
import { kvCacheLayout, slabOffset } from '../layout.js';
import { releaseTestGpu, testGpu } from '../testing/gpu.js';
import { randomCache, randomSlotMapping } from '../testing/random.js';
import { WriteKvCache } from '../write-kv-cache/write-kv-cache.js';
import { writeKvCacheReference } from '../write-kv-cache/write-kv-cache-reference.js';
import { fp8StaticKvFormat } from './fp8-static.js';
import { int4KvFormat } from './int4.js';
import { int4H32KvFormat } from './int4-h32.js';
import { fp8E4m3KvFormat, fp8E5m2KvFormat, int8KvFormat } from './int8-fp8.js';
import { int8H8KvFormat } from './int8-h8.js';
import { kvFormat } from './registry.js';
import type { KvFormat } from './types.js';

afterAll(releaseTestGpu);

/** Rows of head vectors with outlier channels (every 16th channel ~10× larger, offset). */
function rowsWithOutliers(rows: number, headDim: number, seed: number): Float32Array {
  const rnd = seededRandom(seed);
  const x = new Float32Array(rows * headDim);
  for (let r = 0; r < rows; r++) {
    for (let d = 0; d < headDim; d++) {
      const g = (rnd() + rnd() + rnd() - 1.5) * 2;
      x[r * headDim + d] = d % 16 === 3 ? 10 * g + 8 : g;
    }
  }
  return x;
}

// Static scales with headroom over these rows' amax (≤ 38, so ≥ 38 / 448 = 0.085).
const FORMATS: KvFormat[] = [
  int8KvFormat,
  fp8E4m3KvFormat,
  fp8E5m2KvFormat,
  int4KvFormat,
  fp8StaticKvFormat('fp8-e4m3', { keyScale: 0.11, valueScale: 0.1 }),
  int8H8KvFormat,
  int4H32KvFormat,
];

describe.each(FORMATS.map((f) => [f.name, f] as const))('%s', (_name, format) => {
  const numKvHeads = 2;
  const headDim = 64;
  const blockSize = 8;
  const numBlocks = 3;
  const layout = kvCacheLayout({ numKvHeads, headDim, blockSize, format });
  // Every (block, head, kind, t) row, in a shuffled-but-fixed order.
  const rowList: [number, number][] = [];
  for (let b = 0; b < numBlocks; b++) {
    for (let h = 0; h < numKvHeads; h++) {
      for (const kind of [0, 1] as const) {
        for (let t = 0; t < blockSize; t++) rowList.push([slabOffset(layout, b, h, kind), t]);
      }
    }
  }
  const src = rowsWithOutliers(rowList.length, headDim, 5);

  function cpuCache(): Uint32Array {
    const cache = new Uint32Array(numBlocks * layout.blockWords);
    rowList.forEach(([slab, t], r) => {
      format.encodeRow(cache, slab, t, src.subarray(r * headDim, (r + 1) * headDim), blockSize);
    });
    return cache;
  }

  it('keeps slabs 16-byte aligned', () => {
    expect(layout.slabWords % 4).toBe(0);
  });

  it('reconstructs rows with outlier channels within the format accuracy', () => {
    const cache = cpuCache();
    const out = new Float32Array(headDim);
    let worst = 1;
    rowList.forEach(([slab, t], r) => {
      format.decodeRow(cache, slab, t, out, blockSize);
      const x = src.subarray(r * headDim, (r + 1) * headDim);
      let dot = 0;
      let xx = 0;
      let yy = 0;
      for (let i = 0; i < headDim; i++) {
        dot += x[i]! * out[i]!;
        xx += x[i]! * x[i]!;
        yy += out[i]! * out[i]!;
      }
      worst = Math.min(worst, dot / Math.sqrt(xx * yy));
    });
    const floor = format.name.startsWith('int4')
      ? 0.97
      : format.name.startsWith('fp8-e5m2')
        ? 0.99
        : 0.995;
    expect(worst).toBeGreaterThan(floor);
  });

  it('GPU store (wgslStore) writes the same words as encodeRow', async () => {
    const gpu = await testGpu();
    const code = `
@group(0) @binding(0) var<storage, read> src: array<f32>;
@group(0) @binding(1) var<storage, read_write> kv: array<u32>;
@group(0) @binding(2) var<storage, read> rows: array<u32>;
var<private> row_base: u32;
fn kv_src(e: u32) -> f32 { return src[row_base + e]; }
${format.wgslStore({ headDim, blockSize, cacheElement: 'u32' })}
@compute @workgroup_size(1)
fn main(@builtin(workgroup_id) wid: vec3<u32>) {
  let r = wid.x;
  row_base = r * ${headDim}u;
  let slab = rows[2u * r];
  let t = rows[2u * r + 1u];
  var scale = 1.0;
  if (${format.rowScaled}) {
    var m = 0.0;
    for (var e = 0u; e < ${headDim}u; e++) { m = max(m, abs(kv_src(e))); }
    scale = kv_row_scale(m);
    kv_store_scale(slab, t, scale);
  }
  for (var c = 0u; c < ${headDim}u / KV_STORE_CHUNK; c++) { kv_store_chunk(slab, t, c, scale); }
}`;
    const pipeline = await gpu.pipeline({ code, label: `store-${format.name}` });
    const kv = gpu.storageBuffer(numBlocks * layout.blockWords * 4);
    const rows = Uint32Array.from(rowList.flat());
    await gpu.runDispatch(
      pipeline,
      [gpu.storageBuffer(src), kv, gpu.storageBuffer(rows)],
      rowList.length,
    );
    const got = new Uint32Array(await gpu.readBuffer(kv));
    const want = cpuCache();
    const bad: string[] = [];
    for (let i = 0; i < want.length && bad.length < 5; i++) {
      if (got[i] !== want[i])
        bad.push(`word ${i}: gpu ${got[i]!.toString(16)} cpu ${want[i]!.toString(16)}`);
    }
    expect(bad).toEqual([]);
  });

  it('GPU loads (kv_load8, kv_load4) decode exactly as decodeRow', async () => {
    const gpu = await testGpu();
    const chunks = headDim / 8;
    const code = `
@group(0) @binding(0) var<storage, read> kv: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read> rows: array<u32>;
@group(0) @binding(2) var<storage, read_write> out8: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> out4: array<vec4<f32>>;
${format.wgslLoad({ headDim, blockSize })}
@compute @workgroup_size(${chunks})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) c: u32) {
  let r = wid.x;
  let slab = rows[2u * r];
  let t = rows[2u * r + 1u];
  let v = kv_load8(slab, t, c);
  out8[(r * ${chunks}u + c) * 2u] = v[0];
  out8[(r * ${chunks}u + c) * 2u + 1u] = v[1];
  out4[(r * ${chunks}u + c) * 2u] = kv_load4(slab, t, 2u * c);
  out4[(r * ${chunks}u + c) * 2u + 1u] = kv_load4(slab, t, 2u * c + 1u);
}`;
    const cache = cpuCache();
    const pipeline = await gpu.pipeline({ code, label: `load-${format.name}` });
    const n = rowList.length * headDim;
    const o8 = gpu.storageBuffer(n * 4);
    const o4 = gpu.storageBuffer(n * 4);
    await gpu.runDispatch(
      pipeline,
      [gpu.storageBuffer(cache), gpu.storageBuffer(Uint32Array.from(rowList.flat())), o8, o4],
      rowList.length,
    );
    const g8 = new Uint32Array(await gpu.readBuffer(o8));
    const g4 = new Uint32Array(await gpu.readBuffer(o4));
    const want = new Float32Array(n);
    rowList.forEach(([slab, t], r) => {
      format.decodeRow(cache, slab, t, want.subarray(r * headDim, (r + 1) * headDim), blockSize);
    });
    const wb = new Uint32Array(want.buffer);
    const bad: string[] = [];
    for (let i = 0; i < n && bad.length < 5; i++) {
      if (g8[i] !== wb[i] || g4[i] !== wb[i])
        bad.push(`element ${i}: load8 ${g8[i]} load4 ${g4[i]} cpu ${wb[i]}`);
    }
    expect(bad).toEqual([]);
  });
});

describe('fp8 static scales', () => {
  it('uses the key scale in K slabs and the value scale in V slabs', () => {
    const format = fp8StaticKvFormat('fp8-e4m3', { keyScale: 0.5, valueScale: 0.25 });
    const layout = kvCacheLayout({ numKvHeads: 2, headDim: 8, blockSize: 4, format });
    const cache = new Uint32Array(2 * layout.blockWords);
    const row = new Float32Array(8).fill(1);
    format.encodeRow(cache, slabOffset(layout, 1, 1, 0), 2, row, 4);
    format.encodeRow(cache, slabOffset(layout, 1, 1, 1), 2, row, 4);
    // 1 / 0.5 = 2 is E4M3 0x40; 1 / 0.25 = 4 is 0x48.
    expect(cache[slabOffset(layout, 1, 1, 0) + 2 * layout.rowWords]).toBe(0x40404040);
    expect(cache[slabOffset(layout, 1, 1, 1) + 2 * layout.rowWords]).toBe(0x48484848);
    const out = new Float32Array(8);
    format.decodeRow(cache, slabOffset(layout, 1, 1, 1), 2, out, 4);
    expect(Array.from(out)).toEqual(Array.from(row));
  });
  it('rejects a scale that is not finite and positive', () => {
    expect(() => fp8StaticKvFormat('fp8-e5m2', { keyScale: 0, valueScale: 1 })).toThrow(/keyScale/);
  });
});

describe('writeKvCache quantizes on write', () => {
  for (const format of FORMATS) {
    it(`GPU writer equals the CPU reference word for word: ${format.name}`, async () => {
      const gpu = await testGpu();
      const rng = seededRandom(17);
      const c = { numKvHeads: 2, headDim: 64, blockSize: 8, format };
      const numBlocks = 4;
      const numTokens = 20;
      const layout = kvCacheLayout(c);
      const cache = randomCache(rng, layout, numBlocks);
      const key = rowsWithOutliers(numTokens * c.numKvHeads, c.headDim, 21);
      const value = rowsWithOutliers(numTokens * c.numKvHeads, c.headDim, 22);
      // Non-finite inputs: never set a scale, NaN encodes as 0 (code 0 in int4), ±inf saturates.
      key[5] = Number.NaN;
      key[70] = Number.POSITIVE_INFINITY;
      value[3] = Number.NEGATIVE_INFINITY;
      const slots = randomSlotMapping(rng, numTokens, numBlocks, c.blockSize, 0);
      const writer = await WriteKvCache.create(gpu, c);
      const kvCache = gpu.storageBuffer(cache);
      await writer.run({
        key: gpu.storageBuffer(key),
        value: gpu.storageBuffer(value),
        slotMapping: gpu.storageBuffer(slots),
        kvCache,
        numTokens,
        slotMappingHost: slots,
      });
      const want = cache.slice();
      writeKvCacheReference(layout, want, key, value, slots);
      // Scales included: the dynamic scale, its reciprocal and every code are computed alike.
      expect(new Uint32Array(await gpu.readBuffer(kvCache))).toEqual(want);
    });
  }
});

describe('copy-on-write moves the scales with the block', () => {
  for (const format of [int8KvFormat, int4KvFormat, int8H8KvFormat, int4H32KvFormat]) {
    it(`a copied ${format.name} block decodes to the same rows as its source`, async () => {
      const gpu = await testGpu();
      const c = { numKvHeads: 2, headDim: 64, blockSize: 8, format };
      const layout = kvCacheLayout(c);
      // Rows of different magnitude per block, so a block decoded with another's scales differs.
      const cache = randomCache(seededRandom(3), layout, 3, 1);
      const big = randomCache(seededRandom(4), layout, 3, 50);
      cache.set(big.subarray(2 * layout.blockWords), 2 * layout.blockWords);
      const buf = gpu.storageBuffer(cache);
      const copier = await CopyBlocks.create(gpu, c);
      await copier.run({ kvCache: buf, pairs: [[2, 0]] });
      const got = new Uint32Array(await gpu.readBuffer(buf));
      const a = new Float32Array(64);
      const b = new Float32Array(64);
      for (let h = 0; h < 2; h++) {
        for (const kind of [0, 1] as const) {
          for (let t = 0; t < 8; t++) {
            format.decodeRow(got, slabOffset(layout, 0, h, kind), t, a, 8);
            format.decodeRow(cache, slabOffset(layout, 2, h, kind), t, b, 8);
            expect(Array.from(a)).toEqual(Array.from(b));
          }
        }
      }
      expect(Math.max(...Array.from(a).map(Math.abs))).toBeGreaterThan(2);
    });
  }
});

describe('registration', () => {
  it('finds the dynamic-scale formats by name', () => {
    expect(kvFormat('int8')).toBe(int8KvFormat);
    expect(kvFormat('fp8-e4m3')).toBe(fp8E4m3KvFormat);
    expect(kvFormat('fp8-e5m2')).toBe(fp8E5m2KvFormat);
    expect(kvFormat('int4-g32')).toBe(int4KvFormat);
    expect(kvFormat('int8-h8')).toBe(int8H8KvFormat);
    expect(kvFormat('int4-g32-h32')).toBe(int4H32KvFormat);
  });
});
