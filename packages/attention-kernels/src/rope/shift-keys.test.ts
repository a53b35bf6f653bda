import { seededRandom } from '@kvasir/test-utils';
import { afterAll, describe, expect, it } from 'vitest';
import { f32Format } from '../kv-format/float.js';
import { kvCacheLayout } from '../layout.js';
import { releaseTestGpu, testGpu } from '../testing/gpu.js';
import {
  decodeKeys,
  KEY_SHIFT_FORMATS,
  keysAtPositions,
  writeKeys,
} from '../testing/key-shift-fixtures.js';
import { maxAbsDiff } from '../testing/random.js';
import type { RopeConfig, RopeStyle } from './rope-reference.js';
import { ShiftKeys } from './shift-keys.js';
import { type KeyShiftConfig, shiftKeysReference } from './shift-keys-reference.js';

afterAll(releaseTestGpu);

const SHAPES: readonly {
  style: RopeStyle;
  heads: number;
  headDim: number;
  blockSize: number;
  rotaryDim?: number;
}[] = [
  { style: 'rotate-half', heads: 2, headDim: 64, blockSize: 16 },
  { style: 'interleaved', heads: 1, headDim: 32, blockSize: 8, rotaryDim: 16 },
];

describe('ShiftKeys on the GPU vs shiftKeysReference', () => {
  for (const format of KEY_SHIFT_FORMATS) {
    it(`${format.name}: the same keys, V and other blocks untouched`, async () => {
      const gpu = await testGpu();
      for (const [n, shape] of SHAPES.entries()) {
        const rope: RopeConfig = {
          numQHeads: shape.heads * 2,
          numKvHeads: shape.heads,
          headDim: shape.headDim,
          style: shape.style,
          maxPosition: 256,
          ...(shape.rotaryDim === undefined ? {} : { rotaryDim: shape.rotaryDim }),
        };
        const config: KeyShiftConfig = {
          numKvHeads: shape.heads,
          headDim: shape.headDim,
          blockSize: shape.blockSize,
          format,
          rope,
        };
        const kernel = await ShiftKeys.create(gpu, config);
        const layout = kernel.layout;
        const blocks = 5;
        const start = (b: number) => 40 + b * shape.blockSize;
        const { cache, raw } = keysAtPositions(
          seededRandom(n + 1),
          config,
          layout,
          kernel.tables,
          blocks,
          start,
        );
        const shifts = [
          { block: 3, delta: -37 },
          { block: 0, delta: 200 },
          { block: 1, delta: -1 },
        ];
        const buf = gpu.storageBuffer(cache);
        await kernel.run(buf, shifts);
        const got = new Uint32Array(await gpu.readBuffer(buf));
        gpu.releaseBuffer(buf);
        const want = cache.slice();
        shiftKeysReference(config, kernel.tables, want, shifts);
        // The GPU may fuse a multiply-add and round a rotated value differently by an ulp,
        // which can move a quantized code by one step: allow one round trip of the format.
        const f32 = { ...config, format: f32Format };
        const f32Layout = kvCacheLayout(f32);
        const exact = decodeKeys(
          f32Layout,
          writeKeys(f32, f32Layout, kernel.tables, raw, blocks, start),
        );
        const roundTrip = maxAbsDiff(decodeKeys(layout, cache), exact);
        expect(maxAbsDiff(decodeKeys(layout, got), decodeKeys(layout, want))).toBeLessThanOrEqual(
          2 * roundTrip + 2e-6,
        );
        // Block 2 and 4 are not listed: word for word. V slabs: word for word.
        const bw = layout.blockWords;
        for (const b of [2, 4]) {
          expect(got.subarray(b * bw, (b + 1) * bw)).toEqual(cache.subarray(b * bw, (b + 1) * bw));
        }
        for (const b of [0, 1, 3]) {
          for (let h = 0; h < shape.heads; h++) {
            const v = b * bw + (2 * h + 1) * layout.slabWords;
            expect(got.subarray(v, v + layout.slabWords)).toEqual(
              cache.subarray(v, v + layout.slabWords),
            );
          }
        }
        kernel.destroy();
      }
    });
  }

  it('checks host shifts and buffer sizes before recording', async () => {
    const gpu = await testGpu();
    const config: KeyShiftConfig = {
      numKvHeads: 1,
      headDim: 32,
      blockSize: 8,
      format: f32Format,
      rope: { numQHeads: 1, numKvHeads: 1, headDim: 32, style: 'rotate-half', maxPosition: 64 },
    };
    const kernel = await ShiftKeys.create(gpu, config);
    const buf = gpu.storageBuffer(2 * kernel.layout.bytesPerBlock);
    await expect(kernel.run(buf, [{ block: 2, delta: 1 }])).rejects.toMatchObject({
      code: 'BLOCK_OUT_OF_RANGE',
    });
    await expect(kernel.run(buf, [{ block: 1, delta: 64 }])).rejects.toMatchObject({
      code: 'INVALID_ARGUMENT',
    });
    const shifts = kernel.upload([{ block: 0, delta: 1 }]);
    expect(() =>
      kernel.encode(gpu.createEncoder(), { kvCache: buf, shifts, numShifts: 2 }),
    ).toThrow(expect.objectContaining({ code: 'SHAPE_MISMATCH' }));
    await expect(
      ShiftKeys.create(gpu, { ...config, rope: { ...config.rope, headDim: 16 } }),
    ).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    gpu.releaseBuffer(buf);
    gpu.releaseBuffer(shifts);
    kernel.destroy();
  });

  it('reads tables given at encode instead of its own (a model grows them with its positions)', async () => {
    const gpu = await testGpu();
    const rope = {
      numQHeads: 2,
      numKvHeads: 1,
      headDim: 32,
      style: 'rotate-half',
      maxPosition: 4,
    } as const;
    const config: KeyShiftConfig = {
      numKvHeads: 1,
      headDim: 32,
      blockSize: 8,
      format: f32Format,
      rope,
    };
    const small = await ShiftKeys.create(gpu, config);
    const big = await ShiftKeys.create(gpu, { ...config, rope: { ...rope, maxPosition: 128 } });
    const layout = small.layout;
    const { cache } = keysAtPositions(
      seededRandom(9),
      big.config,
      layout,
      big.tables,
      2,
      (b) => 8 * b,
    );
    const shifts = [{ block: 1, delta: -100 }];
    const want = cache.slice();
    shiftKeysReference(big.config, big.tables, want, shifts);
    const buf = gpu.storageBuffer(cache);
    const cos = gpu.storageBuffer(big.tables.cos);
    const sin = gpu.storageBuffer(big.tables.sin);
    const packed = small.upload(shifts);
    expect(() =>
      small.encode(gpu.createEncoder(), {
        kvCache: buf,
        shifts: packed,
        numShifts: 1,
        shiftsHost: shifts,
      }),
    ).toThrow(/maxPosition 4/);
    await gpu.run((e) =>
      small.encode(e, {
        kvCache: buf,
        shifts: packed,
        numShifts: 1,
        shiftsHost: shifts,
        ropeTables: { cos, sin, maxPosition: 128 },
      }),
    );
    const got = new Uint32Array(await gpu.readBuffer(buf));
    expect(maxAbsDiff(decodeKeys(layout, got), decodeKeys(layout, want))).toBeLessThan(2e-6);
    for (const b of [buf, cos, sin, packed]) gpu.releaseBuffer(b);
    small.destroy();
    big.destroy();
  });
});
