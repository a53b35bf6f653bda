import { randomFloats, seededRandom } from '@kvasir/test-utils';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { maxRelDiff } from '../testing/compare.js';
import { readF32, runPass, storage, testDevice, uniformU32 } from '../testing/gpu.js';
import { DenseKernels, type GpuWeight } from './dense-kernels.js';
import {
  addRef,
  biasAddRef,
  embeddingRef,
  type MatmulEpilogue,
  matmulRef,
  rmsNormRef,
  swigluRef,
} from './reference.js';
import { rmsNormWgsl } from './rms-norm.wgsl.js';
import { type PackedWeight, packWeight, unpackWeight, type WeightFormat } from './weight-format.js';

let device: GPUDevice;
let kernels: DenseKernels;

beforeAll(async () => {
  device = await testDevice();
  kernels = new DenseKernels(device);
});
afterAll(() => device?.destroy());

function upload(w: PackedWeight): GpuWeight {
  return {
    format: w.format,
    rows: w.rows,
    cols: w.cols,
    groupSize: w.groupSize,
    data: storage(device, w.data),
    scales: w.scales ? storage(device, w.scales) : undefined,
  };
}

describe('CPU matmul reference', () => {
  it('equals a plain triple loop over the decoded weight', () => {
    const [m, n, k] = [3, 6, 8];
    const x = randomFloats(seededRandom(1), m * k);
    const w = packWeight(randomFloats(seededRandom(2), n * k), n, k, 'f16');
    const dense = unpackWeight(w);
    const bias = randomFloats(seededRandom(3), n);
    const y = matmulRef(x, m, w, { bias });
    for (let i = 0; i < m; i++)
      for (let j = 0; j < n; j++) {
        let s = bias[j] as number;
        for (let t = 0; t < k; t++) s += (x[i * k + t] as number) * (dense[j * k + t] as number);
        expect(y[i * n + j]).toBeCloseTo(s, 5);
      }
    const sw = matmulRef(x, m, w, { bias, epilogue: 'swiglu' });
    for (let i = 0; i < m; i++)
      for (let j = 0; j < n / 2; j++) {
        const g = y[i * n + 2 * j] as number;
        const u = y[i * n + 2 * j + 1] as number;
        expect(sw[i * (n / 2) + j]).toBeCloseTo((g / (1 + Math.exp(-g))) * u, 5);
      }
  });
});

describe('matmul kernels vs CPU reference', () => {
  // n not a multiple of the tile, K/4 not a multiple of the K tile: every guard is exercised.
  const n = 40;
  const k = 72;
  const formats: WeightFormat[] = ['f32', 'f16', 'int8'];
  // 1, 3, 8 take the matrix-vector kernel; 37 the tiled one.
  const ms = [1, 3, 8, 37];
  const cases: Array<[WeightFormat, MatmulEpilogue, boolean]> = [];
  for (const f of formats) {
    cases.push([f, 'store', false], [f, 'residual', false], [f, 'swiglu', false]);
  }
  cases.push(['f16', 'store', true], ['int8', 'swiglu', true], ['f32', 'swiglu-oai', true]);

  it.each(cases)('%s weights, %s epilogue, bias %s', async (format, epilogue, hasBias) => {
    const packed = packWeight(randomFloats(seededRandom(11), n * k), n, k, format, 8);
    const w = upload(packed);
    const bias = hasBias ? randomFloats(seededRandom(12), n) : undefined;
    const biasBuf = bias ? storage(device, bias) : undefined;
    for (const m of ms) {
      const x = randomFloats(seededRandom(100 + m), m * k);
      const outCols = epilogue.startsWith('swiglu') ? n / 2 : n;
      const residual = randomFloats(seededRandom(200 + m), m * outCols);
      const expected = matmulRef(x, m, packed, {
        bias,
        epilogue,
        out: epilogue === 'residual' ? residual.slice() : undefined,
      });
      const y = storage(device, epilogue === 'residual' ? residual : new Float32Array(m * outCols));
      const params = uniformU32(device, m);
      const op = kernels.matmul({ x: storage(device, x), w, y, params, bias: biasBuf, epilogue });
      await runPass(device, (pass) => op.encode(pass, m));
      const got = await readF32(device, y, m * outCols * 4);
      expect(maxRelDiff(got, expected), `m=${m}`).toBeLessThan(1e-5);
    }
  });
});

describe('norm, embedding and element-wise kernels vs CPU reference', () => {
  it('RMSNorm over all rows and over gathered rows', async () => {
    const [m, h, eps] = [5, 96, 1e-5];
    const x = randomFloats(seededRandom(21), m * h, 3);
    const weight = randomFloats(seededRandom(22), h);
    const xb = storage(device, x);
    const wb = storage(device, weight);
    const y = storage(device, m * h * 4);
    const op = kernels.rmsNorm({ x: xb, weight: wb, y, h, eps });
    await runPass(device, (p) => op.encode(p, m));
    expect(
      maxRelDiff(await readF32(device, y, m * h * 4), rmsNormRef(x, m, h, weight, eps)),
    ).toBeLessThan(1e-5);

    const rows = new Int32Array([4, 0, 2]);
    const yg = storage(device, rows.length * h * 4);
    const opg = kernels.rmsNorm({
      x: xb,
      weight: wb,
      y: yg,
      h,
      eps,
      rowIndex: storage(device, rows),
    });
    await runPass(device, (p) => opg.encode(p, rows.length));
    const expected = rmsNormRef(x, rows.length, h, weight, eps, rows);
    expect(maxRelDiff(await readF32(device, yg, rows.length * h * 4), expected)).toBeLessThan(1e-5);
  });

  it.each(['f32', 'f16', 'int8'] as const)('embedding gather from %s table', async (format) => {
    const [vocab, h] = [50, 32];
    const table = packWeight(randomFloats(seededRandom(31), vocab * h), vocab, h, format, 16);
    const ids = new Int32Array([3, 49, 0, 3, 17]);
    const y = storage(device, ids.length * h * 4);
    const op = kernels.embedding({ ids: storage(device, ids), table: upload(table), y });
    await runPass(device, (p) => op.encode(p, ids.length));
    // Decoding is exact in every format: the rows must match bit for bit.
    expect(Array.from(await readF32(device, y, ids.length * h * 4))).toEqual(
      Array.from(embeddingRef(ids, table)),
    );
  });

  it('decodes every finite f16 weight exactly, subnormals and signed zeros included', async () => {
    // All 63,488 finite halves as an f16 table of 8-wide rows: the GPU decode must be exact.
    const halves: number[] = [];
    for (let b = 0; b < 0x10000; b++) if (((b >>> 10) & 0x1f) !== 0x1f) halves.push(b);
    const h = 8;
    const vocab = halves.length / h;
    const data = new Uint32Array(halves.length / 2);
    for (let i = 0; i < data.length; i++)
      data[i] = ((halves[2 * i] as number) | ((halves[2 * i + 1] as number) << 16)) >>> 0;
    const table: PackedWeight = {
      format: 'f16',
      rows: vocab,
      cols: h,
      data,
      scales: undefined,
      groupSize: 0,
    };
    const ids = Int32Array.from({ length: vocab }, (_, i) => i);
    const y = storage(device, vocab * h * 4);
    const op = kernels.embedding({ ids: storage(device, ids), table: upload(table), y });
    await runPass(device, (p) => op.encode(p, vocab));
    const got = new Uint32Array((await readF32(device, y, vocab * h * 4)).buffer);
    const want = new Uint32Array(embeddingRef(ids, table).buffer);
    let bad = 0;
    for (let i = 0; i < got.length; i++) if (got[i] !== want[i]) bad++;
    expect(bad).toBe(0);
  });

  it('SwiGLU, residual add and bias add', async () => {
    const [m, n] = [7, 300];
    const count = m * n;
    const a = randomFloats(seededRandom(41), count, 4);
    const b = randomFloats(seededRandom(42), count, 4);
    const bias = randomFloats(seededRandom(43), n);
    const params = uniformU32(device, count, n);

    const out = storage(device, count * 4);
    const sw = kernels.elementwise('swiglu', {
      a: storage(device, a),
      b: storage(device, b),
      out,
      params,
    });
    await runPass(device, (p) => sw.encode(p, count));
    expect(maxRelDiff(await readF32(device, out, count * 4), swigluRef(a, b))).toBeLessThan(1e-6);

    const acc = storage(device, a);
    const add = kernels.elementwise('add', { a: storage(device, b), out: acc, params });
    await runPass(device, (p) => add.encode(p, count));
    expect(maxRelDiff(await readF32(device, acc, count * 4), addRef(a.slice(), b))).toBeLessThan(
      1e-6,
    );

    const xb = storage(device, a);
    const ba = kernels.elementwise('biasAdd', { a: storage(device, bias), out: xb, params });
    await runPass(device, (p) => ba.encode(p, count));
    expect(
      maxRelDiff(await readF32(device, xb, count * 4), biasAddRef(a.slice(), m, n, bias)),
    ).toBeLessThan(1e-6);
  });
});

describe('pipeline cache', () => {
  it('is shared by every DenseKernels on one device (a second model compiles nothing)', () => {
    const code = rmsNormWgsl(64, 1e-5, false);
    const first = kernels.pipeline(code);
    expect(new DenseKernels(device).pipeline(code)).toBe(first);
    expect(kernels.pipeline(rmsNormWgsl(64, 1e-5, true))).not.toBe(first);
  });
});
