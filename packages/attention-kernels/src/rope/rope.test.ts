import { randomFloats, seededRandom } from '@kvasir/test-utils';
import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import { releaseTestGpu, testGpu } from '../testing/gpu.js';
import { maxAbsDiff, randomInt } from '../testing/random.js';
import { ApplyRope } from './rope.js';
import {
  applyRopeReference,
  type RopeConfig,
  ropeInvFrequencies,
  ropeTables,
} from './rope-reference.js';

afterAll(releaseTestGpu);

/**
 * RoPE written as plainly as possible from the papers, in f64 without tables: pair (a, b) of a
 * head at position p rotates by angle p · theta^(-2i/d).
 */
function naiveRope(
  x: Float64Array,
  heads: number,
  d: number,
  p: number[],
  theta: number,
  style: string,
): void {
  for (let t = 0; t < p.length; t++) {
    for (let h = 0; h < heads; h++) {
      for (let i = 0; i < d / 2; i++) {
        const a = style === 'rotate-half' ? i : 2 * i;
        const b = style === 'rotate-half' ? i + d / 2 : 2 * i + 1;
        const angle = p[t]! * theta ** (-(2 * i) / d);
        const r = (t * heads + h) * d;
        const x0 = x[r + a]!;
        const x1 = x[r + b]!;
        x[r + a] = x0 * Math.cos(angle) - x1 * Math.sin(angle);
        x[r + b] = x1 * Math.cos(angle) + x0 * Math.sin(angle);
      }
    }
  }
}

describe('RoPE CPU reference', () => {
  for (const style of ['rotate-half', 'interleaved'] as const) {
    it(`${style}: agrees with the naive formula within 2e-5`, () => {
      const rng = seededRandom(1);
      const config: RopeConfig = {
        numQHeads: 2,
        numKvHeads: 1,
        headDim: 64,
        style,
        theta: 10000,
        maxPosition: 300,
      };
      const positions = [0, 1, 7, 100, 299];
      const q = randomFloats(rng, positions.length * 2 * 64, 2);
      const k = randomFloats(rng, positions.length * 64, 2);
      const qn = Float64Array.from(q);
      const kn = Float64Array.from(k);
      applyRopeReference(config, ropeTables(config), q, k, Uint32Array.from(positions));
      naiveRope(qn, 2, 64, positions, 10000, style);
      naiveRope(kn, 1, 64, positions, 10000, style);
      expect(maxAbsDiff(q, qn)).toBeLessThan(2e-5);
      expect(maxAbsDiff(k, kn)).toBeLessThan(2e-5);
    });
  }

  it('preserves each pair norm and is the identity at position 0 (property)', () => {
    fc.assert(
      fc.property(fc.integer(), fc.integer({ min: 0, max: 4095 }), (seed, pos) => {
        const rng = seededRandom(seed);
        const config: RopeConfig = {
          numQHeads: 1,
          numKvHeads: 1,
          headDim: 16,
          style: 'interleaved',
          maxPosition: 4096,
        };
        const tables = ropeTables(config);
        const q = randomFloats(rng, 16);
        const k = randomFloats(rng, 16);
        const q0 = q.slice();
        applyRopeReference(config, tables, q, k, new Uint32Array([pos]));
        for (let i = 0; i < 8; i++) {
          const before = Math.hypot(q0[2 * i]!, q0[2 * i + 1]!);
          expect(Math.abs(Math.hypot(q[2 * i]!, q[2 * i + 1]!) - before)).toBeLessThan(1e-5);
        }
        const z = q0.slice();
        applyRopeReference(config, tables, z, k.slice(), new Uint32Array([0]));
        expect(z).toEqual(q0);
      }),
      { numRuns: 50 },
    );
  });

  it('applies Llama-3 frequency scaling as the published rule says', () => {
    const scaling = {
      factor: 8,
      lowFreqFactor: 1,
      highFreqFactor: 4,
      originalMaxPositionEmbeddings: 8192,
    };
    const base: RopeConfig = {
      numQHeads: 1,
      numKvHeads: 1,
      headDim: 128,
      style: 'rotate-half',
      theta: 500000,
      maxPosition: 8,
    };
    const plain = ropeInvFrequencies(base);
    const scaled = ropeInvFrequencies({ ...base, scaling });
    let high = 0;
    let low = 0;
    let mid = 0;
    for (let i = 0; i < 64; i++) {
      const wavelen = (2 * Math.PI) / plain[i]!;
      if (wavelen < 8192 / 4) {
        expect(scaled[i]).toBe(plain[i]); // short wavelengths untouched
        high++;
      } else if (wavelen > 8192) {
        expect(scaled[i]).toBeCloseTo(plain[i]! / 8, 15); // long wavelengths slowed by the factor
        low++;
      } else {
        // In between: strictly between the two, and the blend weight follows the wavelength.
        expect(scaled[i]!).toBeGreaterThan(plain[i]! / 8);
        expect(scaled[i]!).toBeLessThan(plain[i]!);
        const smooth = (8192 / wavelen - 1) / 3;
        expect(scaled[i]!).toBeCloseTo((1 - smooth) * (plain[i]! / 8) + smooth * plain[i]!, 15);
        mid++;
      }
    }
    expect(high).toBeGreaterThan(0);
    expect(low).toBeGreaterThan(0);
    expect(mid).toBeGreaterThan(0);
    expect(plain[0]).toBe(1);
  });

  it('divides by per-pair freqFactors after the scaling (GGUF rope_freqs, HF linear)', () => {
    const base: RopeConfig = {
      numQHeads: 1,
      numKvHeads: 1,
      headDim: 8,
      style: 'rotate-half',
      theta: 10000,
      maxPosition: 4,
    };
    const plain = ropeInvFrequencies(base);
    const factors = [1, 2, 3, 4];
    const divided = ropeInvFrequencies({ ...base, freqFactors: factors });
    for (let i = 0; i < 4; i++) expect(divided[i]).toBe(plain[i]! / factors[i]!);
    const scaling = {
      factor: 8,
      lowFreqFactor: 1,
      highFreqFactor: 4,
      originalMaxPositionEmbeddings: 16,
    };
    const both = ropeInvFrequencies({ ...base, scaling, freqFactors: factors });
    const scaled = ropeInvFrequencies({ ...base, scaling });
    for (let i = 0; i < 4; i++) expect(both[i]).toBe(scaled[i]! / factors[i]!);
    const t = ropeTables({ ...base, freqFactors: factors });
    expect(t.cos[3 * 4 + 3]).toBe(Math.fround(Math.cos(3 * divided[3]!)));
    for (const bad of [
      [1, 2, 3],
      [1, 2, 0, 4],
      [1, 2, Number.NaN, 4],
    ]) {
      expect(() => ropeTables({ ...base, freqFactors: bad })).toThrow(
        expect.objectContaining({ code: 'INVALID_ARGUMENT' }),
      );
    }
  });

  it('leaves dims past rotaryDim alone', () => {
    const rng = seededRandom(2);
    const config: RopeConfig = {
      numQHeads: 1,
      numKvHeads: 1,
      headDim: 64,
      rotaryDim: 32,
      style: 'rotate-half',
      maxPosition: 10,
    };
    const q = randomFloats(rng, 64);
    const k = randomFloats(rng, 64);
    const q0 = q.slice();
    applyRopeReference(config, ropeTables(config), q, k, new Uint32Array([5]));
    expect(q.subarray(32)).toEqual(q0.subarray(32));
    expect(maxAbsDiff(q.subarray(0, 32), q0.subarray(0, 32))).toBeGreaterThan(0);
  });

  it('rejects bad configs and positions', () => {
    const ok: RopeConfig = {
      numQHeads: 1,
      numKvHeads: 1,
      headDim: 64,
      style: 'rotate-half',
      maxPosition: 4,
    };
    expect(() => ropeTables({ ...ok, headDim: 63 })).toThrow(
      expect.objectContaining({ code: 'UNSUPPORTED_HEAD_DIM' }),
    );
    expect(() => ropeTables({ ...ok, rotaryDim: 66 })).toThrow(
      expect.objectContaining({ code: 'INVALID_ARGUMENT' }),
    );
    expect(() => ropeTables({ ...ok, style: 'spiral' as never })).toThrow(
      expect.objectContaining({ code: 'INVALID_ARGUMENT' }),
    );
    expect(() =>
      ropeTables({
        ...ok,
        scaling: {
          factor: 8,
          lowFreqFactor: 4,
          highFreqFactor: 1,
          originalMaxPositionEmbeddings: 8192,
        },
      }),
    ).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
    const q = new Float32Array(64);
    expect(() =>
      applyRopeReference(ok, ropeTables(ok), q, q.slice(), new Uint32Array([4])),
    ).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
  });
});

describe('ApplyRope on the GPU', () => {
  const configs: RopeConfig[] = [
    {
      numQHeads: 4,
      numKvHeads: 2,
      headDim: 64,
      style: 'rotate-half',
      theta: 10000,
      maxPosition: 2048,
    },
    {
      numQHeads: 2,
      numKvHeads: 2,
      headDim: 80,
      style: 'interleaved',
      theta: 10000,
      maxPosition: 512,
    },
    {
      numQHeads: 3,
      numKvHeads: 1,
      headDim: 96,
      style: 'interleaved',
      theta: 1e6,
      maxPosition: 4096,
      rotaryDim: 64,
    },
    {
      numQHeads: 4,
      numKvHeads: 1,
      headDim: 128,
      style: 'rotate-half',
      theta: 500000,
      maxPosition: 16384,
      scaling: {
        factor: 8,
        lowFreqFactor: 1,
        highFreqFactor: 4,
        originalMaxPositionEmbeddings: 8192,
      },
    },
  ];
  for (const config of configs) {
    it(`matches the CPU reference within 1e-5: ${config.style} D=${config.headDim} Hq=${config.numQHeads} Hk=${config.numKvHeads}${config.scaling ? ' llama3' : ''}`, async () => {
      const gpu = await testGpu();
      const rng = seededRandom(config.headDim);
      const n = 13;
      const positions = Uint32Array.from({ length: n }, () => randomInt(rng, config.maxPosition));
      positions[0] = 0;
      positions[1] = config.maxPosition - 1;
      const q = randomFloats(rng, n * config.numQHeads * config.headDim, 3);
      const k = randomFloats(rng, n * config.numKvHeads * config.headDim, 3);
      const rope = await ApplyRope.create(gpu, config);
      const qb = gpu.storageBuffer(q);
      const kb = gpu.storageBuffer(k);
      await rope.run({
        q: qb,
        k: kb,
        positions: gpu.storageBuffer(positions),
        numTokens: n,
        positionsHost: positions,
      });
      applyRopeReference(config, rope.tables, q, k, positions);
      // GPUs may fuse multiply-adds; each output is two products of |x| ≤ 3 with |c|,|s| ≤ 1.
      expect(maxAbsDiff(new Float32Array(await gpu.readBuffer(qb)), q)).toBeLessThan(1e-5);
      expect(maxAbsDiff(new Float32Array(await gpu.readBuffer(kb)), k)).toBeLessThan(1e-5);
      rope.destroy();
    });
  }

  it('rejects bad input before encoding', async () => {
    const gpu = await testGpu();
    const config: RopeConfig = {
      numQHeads: 2,
      numKvHeads: 1,
      headDim: 64,
      style: 'rotate-half',
      maxPosition: 16,
    };
    const rope = await ApplyRope.create(gpu, config);
    const q = gpu.storageBuffer(3 * 2 * 64 * 4);
    const k = gpu.storageBuffer(3 * 64 * 4);
    const positions = gpu.storageBuffer(12);
    const encoder = gpu.createEncoder();
    expect(() => rope.encode(encoder, { q, k, positions, numTokens: 4 })).toThrow(
      expect.objectContaining({ code: 'SHAPE_MISMATCH' }),
    );
    expect(() =>
      rope.encode(encoder, {
        q,
        k,
        positions,
        numTokens: 3,
        positionsHost: new Uint32Array([0, 16, 1]),
      }),
    ).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
    await expect(ApplyRope.create(gpu, { ...config, headDim: 0 })).rejects.toMatchObject({
      code: 'INVALID_ARGUMENT',
    });
    encoder.finish();
    rope.destroy();
  });
});
