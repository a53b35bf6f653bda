import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ModelError } from '../errors.js';
import { type LoadModelOptions, loadModel, type Model } from '../model/model.js';
import { maxRelDiff } from '../testing/compare.js';
import { releaseTestGpu, seqPlan, tempCheckpoint, testGpu, tinyConfig } from '../testing/model.js';
import { kvBlockBytes } from './kv-blocks.js';
import type { KvFormatName } from './kv-cache.js';

const config = tinyConfig();
const vocab = config.vocabSize;
const blockSize = 8;
const numBlocks = 12;
const prompt = Array.from({ length: 13 }, (_, i) => (i * 29 + 3) % vocab);
const other = Array.from({ length: 13 }, (_, i) => (i * 17 + 100) % vocab);
const next = 7;

let ckpt: Awaited<ReturnType<typeof tempCheckpoint>>;
const models: Model[] = [];
const load = async (backend: 'cpu' | 'wasm' | 'webgpu', opts: Partial<LoadModelOptions> = {}) => {
  const m = await loadModel(ckpt.dir, {
    backend,
    numBlocks,
    blockSize,
    kvFormat: 'f32',
    ...(backend === 'webgpu' ? { gpu: await testGpu() } : {}),
    ...(backend === 'wasm' ? { threads: 2 } : {}),
    ...opts,
  });
  models.push(m);
  return m;
};

beforeAll(async () => {
  ckpt = await tempCheckpoint(config, 11);
});
afterAll(async () => {
  for (const m of models) await m.destroy();
  await releaseTestGpu();
  await ckpt?.cleanup();
});

/** Logits of the token after `prompt`, whose KV sits in `table`. */
const decode = (m: Model, table: readonly number[]) =>
  m.forward(seqPlan([next], prompt.length, table, blockSize));

describe.each(['cpu', 'webgpu'] as const)('KV block transfer (%s)', (backend) => {
  it('reads kvBlockBytes per block and writes back the same bytes under other ids', async () => {
    const m = await load(backend);
    expect(m.kvBlockBytes).toBe(config.numLayers * m.kvCache.blockWords * 4);
    expect(m.kvBlockBytes).toBe(kvBlockBytes(m.kvCache));
    await m.forward(seqPlan(prompt, 0, [4, 2], blockSize));
    const out = await m.readBlocks([2, 4]);
    expect(out.byteLength).toBe(2 * m.kvBlockBytes);
    // Written K/V rows are not all zero (the block really holds the prefill).
    expect(new Uint32Array(out.slice().buffer).some((w) => w !== 0)).toBe(true);
    await m.writeBlocks([9, 7], out);
    expect(await m.readBlocks([9, 7])).toEqual(out);
    expect(await m.readBlocks([])).toEqual(new Uint8Array(0));
    // Block 2 (first in the packed bytes) went to 9, block 4 to 7: the table [7, 9] is the
    // sequence's cache moved, so decoding through it gives the original logits.
    expect(await decode(m, [7, 9])).toEqual(await decode(m, [4, 2]));
  });

  it('swapped out, overwritten and written back, the next decode step is unchanged', async () => {
    const ref = await load(backend);
    await ref.forward(seqPlan(prompt, 0, [3, 5], blockSize));
    const want = await decode(ref, [3, 5]);

    const m = await load(backend);
    await m.forward(seqPlan(prompt, 0, [3, 5], blockSize));
    const saved = await m.readBlocks([3, 5]);
    await m.forward(seqPlan(other, 0, [5, 3], blockSize));
    expect(await m.readBlocks([3, 5])).not.toEqual(saved);
    await m.writeBlocks([3, 5], saved);
    expect(await decode(m, [3, 5])).toEqual(want);
  });

  it('rejects bad ids and byte counts before writing anything', async () => {
    const m = await load(backend);
    await m.forward(seqPlan(prompt, 0, [0, 1], blockSize));
    const before = await m.readBlocks([0, 1]);
    const bad = async (p: Promise<unknown>) => {
      const e = await p.then(
        () => undefined,
        (x: unknown) => x,
      );
      expect(ModelError.isInstance(e) && e.code).toBe('INVALID_ARGUMENT');
    };
    const zeros = new Uint8Array(2 * m.kvBlockBytes);
    await bad(m.readBlocks([numBlocks]));
    await bad(m.readBlocks([-1]));
    await bad(m.readBlocks([0.5]));
    await bad(m.writeBlocks([0, numBlocks], zeros));
    await bad(m.writeBlocks([0, 0], zeros));
    await bad(m.writeBlocks([0, 1], zeros.subarray(1)));
    expect(await m.readBlocks([0, 1])).toEqual(before);
  });
});

/** Bytes from a xorshift stream (any words: the cache is raw storage to these operations). */
function noise(length: number, seed: number): Uint8Array {
  const out = new Uint8Array(length);
  let x = seed | 1;
  for (let i = 0; i < length; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    out[i] = x & 0xff;
  }
  return out;
}

/** The first byte where `a` and `b` differ (-1 when equal): faster than deep equality on caches. */
function firstDifference(a: Uint8Array, b: Uint8Array): number {
  if (a.byteLength !== b.byteLength) return Math.min(a.byteLength, b.byteLength);
  return a.findIndex((v, i) => v !== b[i]);
}

const allBlocks = Array.from({ length: numBlocks }, (_, i) => i);

/** Copies as `{ src, dst }`: distinct destinations, any sources (a source may also be written). */
const copiesArb = fc
  .uniqueArray(fc.integer({ min: 0, max: numBlocks - 1 }), { minLength: 0, maxLength: 5 })
  .chain((dsts) =>
    fc.tuple(
      ...dsts.map((dst) => fc.integer({ min: 0, max: numBlocks - 1 }).map((src) => ({ src, dst }))),
    ),
  );

describe.each([
  ['cpu', 25],
  ['wasm', 25],
  ['webgpu', 12],
] as const)('KV block copies on the device (%s)', (backend, numRuns) => {
  it('copyBlocks leaves the cache as reading the sources and writing them back did', async () => {
    const m = await load(backend);
    const bpb = m.kvBlockBytes;
    await fc.assert(
      fc.asyncProperty(
        copiesArb,
        fc.integer({ min: 0, max: 2 ** 31 - 1 }),
        async (copies, seed) => {
          const start = noise(numBlocks * bpb, seed);
          // The host path copy-on-write took before: every source out, then into place.
          await m.writeBlocks(allBlocks, start);
          const staged = await m.readBlocks(copies.map((c) => c.src));
          await m.writeBlocks(
            copies.map((c) => c.dst),
            staged,
          );
          const viaHost = await m.readBlocks(allBlocks);

          await m.writeBlocks(allBlocks, start);
          await m.copyBlocks(copies);
          const onDevice = await m.readBlocks(allBlocks);
          expect(firstDifference(onDevice, viaHost)).toBe(-1);
          // And what that is: each destination holds its source's old bytes, the rest is as it was.
          const want = start.slice();
          for (const c of copies)
            want.set(start.subarray(c.src * bpb, (c.src + 1) * bpb), c.dst * bpb);
          expect(firstDifference(onDevice, want)).toBe(-1);
        },
      ),
      { numRuns },
    );
  });

  it('a sequence decodes the same through its copied blocks, after a step that wrote elsewhere', async () => {
    const m = await load(backend);
    await m.forward(seqPlan(prompt, 0, [4, 2], blockSize));
    const want = await decode(m, [4, 2]);
    await m.copyBlocks([
      { src: 4, dst: 7 },
      { src: 2, dst: 9 },
    ]);
    await m.forward(seqPlan(other, 0, [4, 2], blockSize));
    expect(await decode(m, [7, 9])).toEqual(want);
  });

  it('rejects bad copies before copying anything', async () => {
    const m = await load(backend);
    await m.forward(seqPlan(prompt, 0, [0, 1], blockSize));
    const before = await m.readBlocks(allBlocks);
    for (const copies of [
      [{ src: 0, dst: numBlocks }],
      [{ src: -1, dst: 3 }],
      [{ src: 0.5, dst: 3 }],
      [
        { src: 0, dst: 3 },
        { src: 1, dst: 3 },
      ],
      [null],
      'copies',
    ]) {
      const e = await m.copyBlocks(copies as never).then(
        () => undefined,
        (x: unknown) => x,
      );
      expect(ModelError.isInstance(e) && e.code).toBe('INVALID_ARGUMENT');
    }
    expect(firstDifference(await m.readBlocks(allBlocks), before)).toBe(-1);
  });
});

describe('KV block transfer (CPU, properties and formats)', () => {
  it('any bytes written to distinct blocks read back exactly, other blocks untouched', async () => {
    const m = await load('cpu');
    const bpb = m.kvBlockBytes;
    await fc.assert(
      fc.asyncProperty(
        fc.uniqueArray(fc.integer({ min: 0, max: numBlocks - 1 }), { minLength: 1, maxLength: 4 }),
        fc.integer({ min: 0, max: 2 ** 31 - 1 }),
        fc.integer({ min: 0, max: 3 }),
        async (ids, seed, pad) => {
          const all = Array.from({ length: numBlocks }, (_, i) => i);
          const before = await m.readBlocks(all);
          // A view at an odd byte offset: writes must not assume alignment.
          const host = new Uint8Array(pad + ids.length * bpb);
          let x = seed | 1;
          for (let i = 0; i < host.length; i++) {
            x ^= x << 13;
            x ^= x >>> 17;
            x ^= x << 5;
            host[i] = x & 0xff;
          }
          const bytes = host.subarray(pad);
          await m.writeBlocks(ids, bytes);
          expect(await m.readBlocks(ids)).toEqual(bytes.slice());
          const after = await m.readBlocks(all);
          for (const b of all) {
            if (ids.includes(b)) continue;
            expect(after.subarray(b * bpb, (b + 1) * bpb)).toEqual(
              before.subarray(b * bpb, (b + 1) * bpb),
            );
          }
        },
      ),
      { numRuns: 25 },
    );
  });

  it.each(['f16', 'int8', 'int4-g32'] as const)(
    '%s blocks carry their scales: swap gives identical logits',
    async (kvFormat: KvFormatName) => {
      const m = await load('cpu', { kvFormat });
      expect(m.kvBlockBytes).toBe(config.numLayers * m.kvCache.blockWords * 4);
      await m.forward(seqPlan(prompt, 0, [3, 5], blockSize));
      const saved = await m.readBlocks([3, 5]);
      await m.writeBlocks([10, 11], saved);
      await m.forward(seqPlan(other, 0, [5, 3], blockSize));
      const want = await decode(m, [10, 11]);
      await m.writeBlocks([3, 5], saved);
      expect(await decode(m, [3, 5])).toEqual(want);
    },
  );
});

describe('KV block bytes across backends (f32 cache)', () => {
  it('CPU and WebGPU caches hold the same K/V for the same plan and interchange', async () => {
    const cpu = await load('cpu');
    const gpu = await load('webgpu');
    const plan = seqPlan(prompt, 0, [6, 1], blockSize);
    await cpu.forward(plan);
    await gpu.forward(plan);
    const a = await cpu.readBlocks([6, 1]);
    const b = await gpu.readBlocks([6, 1]);
    expect(b.byteLength).toBe(a.byteLength);
    // The K/V values come from each backend's own matmuls (different summation order), so
    // the words agree to float rounding (about 3e-7 relative here), not bit for bit.
    const fa = new Float32Array(a.buffer);
    const fb = new Float32Array(b.buffer);
    expect(maxRelDiff(fb, fa)).toBeLessThan(1e-5);
    // CPU bytes written into the GPU cache decode like the CPU.
    await gpu.writeBlocks([2, 8], a);
    const viaGpu = await decode(gpu, [2, 8]);
    expect(maxRelDiff(viaGpu, await decode(cpu, [6, 1]))).toBeLessThan(2e-4);
  });
});
