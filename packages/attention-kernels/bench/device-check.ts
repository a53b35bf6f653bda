// Correctness on whatever adapter is present, at serving-sized shapes: every attention kernel and
// KV format against its CPU reference. Written for the one short run a lent real GPU allows
// (`tooling/device/run.sh`); on the software adapter it runs too, only slower.
//   pnpm --filter @kvasir/attention-kernels exec tsx bench/device-check.ts
// Prints one JSON line per case and a closing `{"checks":N,"failed":N}`; exits 1 on a failure.
// `--only=compression` checks only the KV-compression kernels (attention mass, key shifts);
// `--only=features` only the model features on every kernel (sliding window, sinks, soft cap).
import { createGpu } from '@kvasir/gpu';
import { seededRandom } from '@kvasir/test-utils';
import { PagedAttentionMass } from '../src/attention/attention-mass.js';
import { PagedDecodeAttention } from '../src/decode/paged-decode.js';
import { pagedDecodeAttentionCpu } from '../src/decode/paged-decode-reference.js';
import { f16Format, f32Format } from '../src/kv-format/float.js';
import { kvFormat } from '../src/kv-format/registry.js';
import type { KvFormat } from '../src/kv-format/types.js';
import { kvCacheLayout } from '../src/layout.js';
import { PagedPrefillAttention } from '../src/prefill/paged-prefill.js';
import { pagedPrefillAttentionCpu } from '../src/prefill/paged-prefill-reference.js';
import { ropeTables } from '../src/rope/rope-reference.js';
import { ShiftKeys } from '../src/rope/shift-keys.js';
import { type KeyShiftConfig, shiftKeysReference } from '../src/rope/shift-keys-reference.js';
import {
  decodeKeys,
  KEY_SHIFT_FORMATS,
  keysAtPositions,
  writeKeys,
} from '../src/testing/key-shift-fixtures.js';
import { pagedFixture, prefillBatchFixture, randomQuery } from '../src/testing/paged-fixtures.js';
import { maxAbsDiff } from '../src/testing/random.js';

/** GPU (f32, exp2) vs CPU (f64) on values in [-1, 1): the unit tests' tolerances. */
const TOL = { float: 2e-5, quantized: 2e-4 };

const formats: KvFormat[] = [
  f32Format,
  f16Format,
  ...['int8', 'fp8-e4m3', 'int4-g32'].map(kvFormat),
];
const DECODE_KERNELS = ['hardware', 'subgroup', 'software', 'tiled'] as const;
const PREFILL_KERNELS = ['software', 'tiled'] as const;
const gpu = await createGpu();
const subgroups = gpu.features.has('subgroups');
console.log(
  JSON.stringify({
    adapter: gpu.describe(),
    backend: gpu.backend,
    subgroup_sizes: subgroups
      ? [gpu.adapterInfo.subgroupMinSize, gpu.adapterInfo.subgroupMaxSize]
      : undefined,
  }),
);
let checks = 0;
let failed = 0;

function report(
  kind: string,
  format: KvFormat,
  shape: object,
  err: number,
  tol = format === f32Format || format === f16Format ? TOL.float : TOL.quantized,
): void {
  const ok = Number.isFinite(err) && err < tol;
  checks++;
  if (!ok) failed++;
  console.log(JSON.stringify({ kind, format: format.name, ...shape, max_abs_err: err, ok }));
}

// `--only=compression` runs just the KV-compression kernels (attention mass, key shifts).
const onlyCompression = process.argv.includes('--only=compression');
const onlyFeatures = process.argv.includes('--only=features');

/**
 * Model features on every decode and prefill kernel (the subgroup one where the adapter has
 * subgroups): gpt-oss's sliding window with attention sinks, and a Gemma-style window with a
 * soft cap. The unit tests cover them on the software adapters only.
 */
async function checkFeatures(): Promise<void> {
  const rng = seededRandom(31);
  const sinks = Array.from({ length: 64 }, () => 4 * rng() - 2);
  const cases = [
    {
      name: 'gpt-oss',
      numQHeads: 64,
      numKvHeads: 8,
      headDim: 64,
      blockSize: 16,
      window: 128,
      sinks,
    },
    { name: 'gpt-oss-full', numQHeads: 64, numKvHeads: 8, headDim: 64, blockSize: 16, sinks },
    {
      name: 'gemma',
      numQHeads: 8,
      numKvHeads: 4,
      headDim: 128,
      blockSize: 16,
      window: 512,
      softCap: 50,
    },
  ];
  for (const format of [f16Format, kvFormat('int8')]) {
    for (const { name, ...shape } of cases) {
      const lens = [1, 100, 129, 1000, 3000];
      const fx = pagedFixture(rng, { ...shape, format, contextLens: lens, spareBlocks: 7 });
      const query = randomQuery(rng, fx.config, lens.length);
      const args = {
        query,
        blockTables: fx.blockTables,
        contextLens: fx.contextLens,
        numSeqs: lens.length,
        maxBlocksPerSeq: fx.maxBlocksPerSeq,
      };
      const want = pagedDecodeAttentionCpu(fx.config, { ...args, kvCache: fx.cache });
      const kvCache = gpu.storageBuffer(fx.cache);
      for (const kind of DECODE_KERNELS.filter((k) => k !== 'subgroup' || subgroups)) {
        const kernel = await PagedDecodeAttention.create(gpu, fx.config, { kernel: kind });
        for (const numSplits of [1, 'auto'] as const) {
          const got = await kernel.run({ ...args, kvCache, numSplits });
          report(`decode-${kind}-${name}`, format, { lens, numSplits }, maxAbsDiff(got, want));
        }
      }
      gpu.releaseBuffer(kvCache);
      const pasts = [0, 300, 1999];
      const queryLens = [200, 77, 1];
      const pre = prefillBatchFixture(rng, { ...shape, format, spareBlocks: 5 }, pasts, queryLens);
      const wantPre = pagedPrefillAttentionCpu(pre.fx.config, {
        ...pre.args,
        kvCache: pre.fx.cache,
      });
      const preCache = gpu.storageBuffer(pre.fx.cache);
      for (const kind of PREFILL_KERNELS) {
        const kernel = await PagedPrefillAttention.create(gpu, pre.fx.config, { kernel: kind });
        const got = await kernel.run({ ...pre.args, kvCache: preCache });
        report(`prefill-${kind}-${name}`, format, { pasts, queryLens }, maxAbsDiff(got, wantPre));
      }
      gpu.releaseBuffer(preCache);
    }
  }
}

try {
  if (!onlyCompression) await checkFeatures();
  for (const format of onlyCompression || onlyFeatures ? [] : formats) {
    const shapes = [
      { numQHeads: 32, numKvHeads: 8, headDim: 128, blockSize: 16, lens: [1, 17, 300, 2048, 4100] },
      { numQHeads: 8, numKvHeads: 1, headDim: 80, blockSize: 32, lens: [5, 64, 1025] },
      { numQHeads: 12, numKvHeads: 12, headDim: 64, blockSize: 8, lens: [9, 700] },
    ];
    for (const [i, s] of shapes.entries()) {
      if ((s.headDim / 8) % 4 !== 0 && format.name.startsWith('int4')) continue; // groups of 32
      const rng = seededRandom(100 + i);
      const fx = pagedFixture(rng, { ...s, format, contextLens: s.lens, spareBlocks: 7 });
      const numSeqs = s.lens.length;
      const query = randomQuery(rng, fx.config, numSeqs);
      const args = {
        query,
        blockTables: fx.blockTables,
        contextLens: fx.contextLens,
        numSeqs,
        maxBlocksPerSeq: fx.maxBlocksPerSeq,
      };
      const want = pagedDecodeAttentionCpu(fx.config, { ...args, kvCache: fx.cache });
      const kvCache = gpu.storageBuffer(fx.cache);
      // Every kernel (not only the adapter's default) on the f16 GQA shape; the subgroup kernel
      // (opt-in, where the adapter has subgroups) on every shape and format.
      const kinds = (
        format === f16Format && i === 0 ? DECODE_KERNELS : (['auto', 'subgroup'] as const)
      ).filter((k) => k !== 'subgroup' || subgroups);
      for (const kind of kinds) {
        const kernel = await PagedDecodeAttention.create(gpu, fx.config, { kernel: kind });
        for (const numSplits of [1, 'auto'] as const) {
          const got = await kernel.run({ ...args, kvCache, numSplits });
          const name = kind === 'auto' ? 'decode' : `decode-${kind}`;
          report(name, format, { ...s, numSplits }, maxAbsDiff(got, want));
        }
      }
      gpu.releaseBuffer(kvCache);
    }
    const prefill = { numQHeads: 32, numKvHeads: 8, headDim: 128, blockSize: 16, format };
    const pasts = [0, 500, 1999];
    const queryLens = [128, 77, 1];
    const { fx, args } = prefillBatchFixture(
      seededRandom(7),
      { ...prefill, spareBlocks: 5 },
      pasts,
      queryLens,
    );
    const want = pagedPrefillAttentionCpu(fx.config, { ...args, kvCache: fx.cache });
    const kvCache = gpu.storageBuffer(fx.cache);
    const kinds = format === f16Format ? PREFILL_KERNELS : (['auto'] as const);
    for (const kind of kinds) {
      const kernel = await PagedPrefillAttention.create(gpu, fx.config, { kernel: kind });
      const got = await kernel.run({ ...args, kvCache });
      const name = kind === 'auto' ? 'prefill' : `prefill-${kind}`;
      report(name, format, { pasts, queryLens }, maxAbsDiff(got, want));
    }
    gpu.releaseBuffer(kvCache);
  }
  // Attention mass (KV compression): an observation window, a whole chunk and a decode, GQA 32/8.
  for (const format of onlyFeatures ? [] : formats) {
    const pasts = [0, 500, 1999];
    const queryLens = [128, 77, 1];
    const { fx, args } = prefillBatchFixture(
      seededRandom(7),
      { numQHeads: 32, numKvHeads: 8, headDim: 128, blockSize: 16, format, spareBlocks: 5 },
      pasts,
      queryLens,
    );
    const kvCache = gpu.storageBuffer(fx.cache);
    const massQueries = Uint32Array.of(16, 77, 1);
    const wantMass = new Float32Array(pasts.length * fx.maxBlocksPerSeq);
    pagedPrefillAttentionCpu(fx.config, {
      ...args,
      kvCache: fx.cache,
      massQueries,
      massOut: wantMass,
    });
    const mass = await PagedAttentionMass.create(gpu, fx.config);
    const numTokens = queryLens.reduce((a, b) => a + b, 0);
    const gotMass = await mass.run({ ...args, kvCache, massQueries, numTokens });
    gpu.releaseBuffer(kvCache);
    // Relative to the largest block's mass (sums of up to 32 heads × 77 queries); llvmpipe
    // measured up to 2.3e-6 (int4-g32).
    const largest = Math.max(1, ...wantMass);
    report(
      'attention-mass',
      format,
      { pasts, queryLens, massQueries: [...massQueries] },
      maxAbsDiff(gotMass, wantMass) / largest,
      1e-5,
    );
  }
  // Key shifts (KV compression), every format, Llama-3-style RoPE at serving size.
  for (const format of onlyFeatures ? [] : KEY_SHIFT_FORMATS) {
    const rope = {
      numQHeads: 32,
      numKvHeads: 8,
      headDim: 128,
      style: 'rotate-half',
      theta: 500000,
      maxPosition: 8192,
      scaling: {
        factor: 8,
        lowFreqFactor: 1,
        highFreqFactor: 4,
        originalMaxPositionEmbeddings: 8192,
      },
    } as const;
    const config: KeyShiftConfig = { numKvHeads: 8, headDim: 128, blockSize: 16, format, rope };
    const tables = ropeTables(rope);
    const kernel = await ShiftKeys.create(gpu, config);
    const blocks = 64;
    const start = (b: number) => 1000 + 16 * b;
    const { cache, raw } = keysAtPositions(
      seededRandom(21),
      config,
      kernel.layout,
      tables,
      blocks,
      start,
    );
    const shifts = Array.from({ length: blocks / 2 }, (_, i) => ({
      block: 2 * i,
      delta: i % 2 ? 4000 : -1000,
    }));
    const want = cache.slice();
    shiftKeysReference(config, tables, want, shifts);
    const buf = gpu.storageBuffer(cache);
    await kernel.run(buf, shifts);
    const got = new Uint32Array(await gpu.readBuffer(buf));
    gpu.releaseBuffer(buf);
    kernel.destroy();
    // One rounding of a rotated value may differ by an ulp (fused multiply-add), moving a code
    // by one step: the tolerance is two round trips of the format on these keys.
    const f32 = { ...config, format: f32Format };
    const f32Layout = kvCacheLayout(f32);
    const exact = decodeKeys(f32Layout, writeKeys(f32, f32Layout, tables, raw, blocks, start));
    const roundTrip = maxAbsDiff(decodeKeys(kernel.layout, cache), exact);
    const vSame = got.every((w, i) => {
      const inSlab = (i % kernel.layout.blockWords) / kernel.layout.slabWords;
      return Math.floor(inSlab) % 2 === 0 || w === cache[i];
    });
    report(
      'shift-keys',
      format,
      { blocks: shifts.length, v_untouched: vSame },
      vSame
        ? maxAbsDiff(decodeKeys(kernel.layout, got), decodeKeys(kernel.layout, want))
        : Number.NaN,
      2 * roundTrip + 2e-6,
    );
  }
} finally {
  gpu.destroy();
}
console.log(JSON.stringify({ checks, failed }));
if (failed > 0) process.exitCode = 1;
