import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { encodeKvRow, pagedAttentionCpu } from '../forward-cpu.js';
import { normalizePlan } from '../forward-plan.js';
import { applyRopeRows, ropeTables } from '../forward-rope.js';
import { kvCacheSpec, kvRowWord } from '../kv-cache.js';
import { tinyConfig } from '../model.test-util.js';
import { pagedAttentionWgsl } from './paged-attention.wgsl.js';
import { ropeKvWriteWgsl } from './rope-kv-write.wgsl.js';
import { readF32, runPass, storage, testDevice, uniformU32 } from './test-gpu.js';
import { maxRelDiff, randomF32 } from './test-util.js';

let device: GPUDevice;
beforeAll(async () => {
  device = await testDevice();
});
afterAll(() => device?.destroy());

function bind(p: GPUComputePipeline, bufs: GPUBuffer[]): GPUBindGroup {
  return device.createBindGroup({
    layout: p.getBindGroupLayout(0),
    entries: bufs.map((buffer, binding) => ({ binding, resource: { buffer } })),
  });
}

describe.each([
  ['f32', 64, 2, 1, 8],
  ['f16', 64, 4, 2, 16],
  ['f32', 128, 2, 2, 8],
  ['f16', 32, 4, 1, 32],
] as const)(
  'RoPE + cache write and paged attention (%s, head dim %i, %i/%i heads, block %i)',
  (format, d, hq, hkv, bs) => {
    it('match the CPU path on a mixed batch over scattered blocks', async () => {
      const config = tinyConfig({ headDim: d, numHeads: hq, numKvHeads: hkv, hiddenSize: hq * d });
      const spec = kvCacheSpec(config, { kvFormat: format, blockSize: bs, numBlocks: 12 });
      // seq 0: 70 cached + 5 new (crosses 64-key tiles); seq 1: decode at 19; seq 2: fresh 3.
      const seqs = [
        {
          queryStart: 0,
          queryLen: 5,
          contextLen: 75,
          blockTable: [3, 7, 0, 11, 5, 9, 2, 1, 4, 6].slice(0, Math.ceil(75 / bs)),
        },
        {
          queryStart: 5,
          queryLen: 1,
          contextLen: 20,
          blockTable: [8, 10, 6].slice(0, Math.ceil(20 / bs)),
        },
        { queryStart: 6, queryLen: 3, contextLen: 3, blockTable: [10] },
      ];
      if (bs === 8)
        seqs[0] = {
          ...(seqs[0] as (typeof seqs)[0]),
          contextLen: 40,
          blockTable: [3, 7, 0, 11, 5],
        };
      const t = 9;
      const positions = new Int32Array(t);
      const slots = new Int32Array(t);
      for (const s of seqs)
        for (let i = 0; i < s.queryLen; i++) {
          const p = s.contextLen - s.queryLen + i;
          positions[s.queryStart + i] = p;
          slots[s.queryStart + i] = (s.blockTable[Math.floor(p / bs)] as number) * bs + (p % bs);
        }
      slots[7] = -1; // padding row: must not be written
      const plan = normalizePlan(
        {
          tokenIds: new Int32Array(t),
          positions,
          slotMapping: slots,
          seqs,
          logitsIndices: new Int32Array(0),
        },
        { vocabSize: 1, numBlocks: 12, blockSize: bs, maxPosition: 4096 },
      );
      // Random history in the cache, then the step's rows.
      const cache = new Uint32Array(spec.layerWords);
      const hist = randomF32(spec.numBlocks * spec.blockSize * hkv * d, 5);
      for (let slot = 0; slot < spec.numBlocks * bs; slot++)
        for (let h = 0; h < hkv; h++) {
          encodeKvRow(
            spec,
            cache,
            kvRowWord(spec, slot, h, 0),
            hist,
            ((slot * hkv + h) * d) % (hist.length - d),
          );
          encodeKvRow(
            spec,
            cache,
            kvRowWord(spec, slot, h, 1),
            hist,
            ((slot * hkv + h + 1) * d) % (hist.length - d),
          );
        }
      const q = randomF32(t * hq * d, 6);
      const k = randomF32(t * hkv * d, 7);
      const v = randomF32(t * hkv * d, 8);
      const rope = ropeTables(config, 128);

      const cpuCache = cache.slice();
      const cq = q.slice();
      const ck = k.slice();
      for (let i = 0; i < t; i++) {
        applyRopeRows(cq, i * hq * d, hq, d, rope.cos, rope.sin, positions[i] as number);
        applyRopeRows(ck, i * hkv * d, hkv, d, rope.cos, rope.sin, positions[i] as number);
        if ((slots[i] as number) < 0) continue;
        for (let h = 0; h < hkv; h++) {
          encodeKvRow(
            spec,
            cpuCache,
            kvRowWord(spec, slots[i] as number, h, 0),
            ck,
            (i * hkv + h) * d,
          );
          encodeKvRow(
            spec,
            cpuCache,
            kvRowWord(spec, slots[i] as number, h, 1),
            v,
            (i * hkv + h) * d,
          );
        }
      }
      const expected = new Float32Array(t * hq * d);
      pagedAttentionCpu(config, spec, cpuCache, cq, plan, expected);

      const shape = {
        numHeads: hq,
        numKvHeads: hkv,
        headDim: d,
        blockSize: bs,
        f16: format === 'f16',
        rowWords: spec.rowWords,
        slabWords: spec.slabWords,
        blockWords: spec.blockWords,
      };
      const ropeP = device.createComputePipeline({
        layout: 'auto',
        compute: {
          module: device.createShaderModule({ code: ropeKvWriteWgsl(shape) }),
          entryPoint: 'main',
        },
      });
      const attnP = device.createComputePipeline({
        layout: 'auto',
        compute: {
          module: device.createShaderModule({ code: pagedAttentionWgsl(shape) }),
          entryPoint: 'main',
        },
      });
      const qb = storage(device, q);
      const cb = storage(device, cache);
      const out = storage(device, expected.byteLength);
      const info = new Uint32Array(2 * t);
      plan.queryStarts.forEach((qs, r) => {
        for (let i = 0; i < (plan.queryLens[r] as number); i++) {
          info[2 * (qs + i)] = r;
          info[2 * (qs + i) + 1] =
            (plan.contextLens[r] as number) - (plan.queryLens[r] as number) + i + 1;
        }
      });
      const g1 = bind(ropeP, [
        qb,
        storage(device, k),
        storage(device, v),
        cb,
        storage(device, rope.cos),
        storage(device, rope.sin),
        storage(device, positions),
        storage(device, slots),
      ]);
      const g2 = bind(attnP, [
        qb,
        cb,
        out,
        uniformU32(device, plan.maxBlocksPerSeq),
        storage(device, info),
        storage(device, plan.blockTables),
      ]);
      await runPass(device, (pass) => {
        pass.setPipeline(ropeP);
        pass.setBindGroup(0, g1);
        pass.dispatchWorkgroups(t);
        pass.setPipeline(attnP);
        pass.setBindGroup(0, g2);
        pass.dispatchWorkgroups(hq, t);
      });
      expect(maxRelDiff(await readF32(device, qb, cq.byteLength), cq)).toBeLessThan(1e-6);
      const gotCache = new Uint32Array((await readF32(device, cb, cache.byteLength)).buffer);
      let mismatched = 0;
      for (let i = 0; i < cache.length; i++) if (gotCache[i] !== cpuCache[i]) mismatched++;
      if (format === 'f16') expect(mismatched).toBe(0);
      else
        expect(
          maxRelDiff(new Float32Array(gotCache.buffer), new Float32Array(cpuCache.buffer)),
        ).toBeLessThan(1e-6);
      expect(maxRelDiff(await readF32(device, out, expected.byteLength), expected)).toBeLessThan(
        1e-5,
      );
    });
  },
);
