// Paged attention figures: decode_gbps / decode_vs_stream, paged_vs_contiguous,
// prefill_tflops and decode_split_k_gain, all from the same run as stream_read_gbps.
import type { Gpu } from '@kvasir/gpu';
import { randomFloats, seededRandom } from '@kvasir/test-utils';
import type { PagedAttentionConfig } from '../src/attention/config.js';
import { PagedDecodeAttention, type PagedDecodePlan } from '../src/decode/paged-decode.js';
import { f16Format, f32Format } from '../src/kv-format/float.js';
import { kvCacheLayout } from '../src/layout.js';
import { PagedPrefillAttention } from '../src/prefill/paged-prefill.js';
import { shuffledRange } from '../src/testing/random.js';
import { type BenchSection, medianMs } from './harness.js';
import { round } from './stream.js';

/** (ceiling, decode) pairs behind decode_vs_stream. */
const PAIRS = 7;

const CONFIG = {
  numQHeads: 32,
  numKvHeads: 8,
  headDim: 128,
  blockSize: 16,
  format: f16Format,
} as const;

/** A cache buffer of `numBlocks` blocks of valid f16 values (a repeated random pattern). */
function fillCache(gpu: Gpu, bytes: number, seed: number): GPUBuffer {
  const buffer = gpu.storageBuffer(bytes, 'bench-kv-cache');
  const rng = seededRandom(seed);
  const pattern = new Uint32Array(1 << 18);
  for (let i = 0; i < pattern.length; i++) {
    // Two halves in [-1, 1): sign, exponent 14 or less, random mantissa.
    const h = () =>
      ((rng() < 0.5 ? 0x8000 : 0) | (((rng() * 15) | 0) << 10) | ((rng() * 1024) | 0)) >>> 0;
    pattern[i] = (h() | (h() << 16)) >>> 0;
  }
  for (let off = 0; off < bytes; off += pattern.byteLength) {
    gpu.upload(buffer, pattern.subarray(0, Math.min(pattern.length, (bytes - off) / 4)), off);
  }
  return buffer;
}

export const attentionSection: BenchSection = async (ctx) => {
  const { gpu } = ctx;
  const small = ctx.quick;
  const layout = kvCacheLayout(CONFIG);
  const maxBinding = Math.min(gpu.limits.maxStorageBufferBindingSize, gpu.limits.maxBufferSize);
  const decode = await PagedDecodeAttention.create(gpu, CONFIG);
  const rng = seededRandom(7);
  const samples = gpu.isSoftware || small ? 3 : 10;

  // --- decode_gbps, decode_vs_stream, paged_vs_contiguous: batch 32 × context 2,048. ---
  const batch = small ? 8 : 32;
  const context = 2048;
  const blocksPerSeq = context / CONFIG.blockSize;
  // The cache may exceed one storage binding (256 MiB here vs llvmpipe's 128 MiB): split the
  // batch over as many layer-sized buffers as needed, all encoded into one submission.
  const seqsPerCache = Math.max(
    1,
    Math.min(batch, Math.floor(maxBinding / (blocksPerSeq * layout.bytesPerBlock))),
  );
  const parts = Math.ceil(batch / seqsPerCache);
  const blocksPerCache = seqsPerCache * blocksPerSeq;
  const caches = Array.from({ length: parts }, (_, i) =>
    fillCache(gpu, blocksPerCache * layout.bytesPerBlock, i + 1),
  );
  const rowFloats = CONFIG.numQHeads * CONFIG.headDim;
  const query = gpu.storageBuffer(randomFloats(rng, seqsPerCache * rowFloats));
  const output = gpu.storageBuffer(seqsPerCache * rowFloats * 4);
  const contextLens = new Uint32Array(seqsPerCache).fill(context);
  const contiguous = Uint32Array.from({ length: blocksPerCache }, (_, i) => i);
  const shuffled = Uint32Array.from(shuffledRange(rng, blocksPerCache));
  const planFor = (tables: Uint32Array): PagedDecodePlan =>
    decode.plan({
      blockTables: tables,
      contextLens,
      numSeqs: seqsPerCache,
      maxBlocksPerSeq: blocksPerSeq,
    });
  const contiguousPlan = planFor(contiguous);
  const shuffledPlan = planFor(shuffled);
  const timeDecode = (plan: PagedDecodePlan, options: { samples?: number; warmup?: number } = {}) =>
    medianMs(
      gpu,
      (e) => {
        for (const kvCache of caches) decode.encode(e, { plan, query, kvCache, output });
      },
      { samples, ...options },
    );
  const tShuffled = await timeDecode(shuffledPlan);
  const tContiguous = await timeDecode(contiguousPlan);
  const kvBytes = parts * seqsPerCache * context * CONFIG.numKvHeads * CONFIG.headDim * 2 * 2;
  const decodeGbps = kvBytes / (tShuffled.ms / 1000) / 1e9;
  // decode_vs_stream from pairs: each decode timing right after a ceiling measurement, the
  // median of the pairs' ratios (the ceiling of a shared machine drifts within a run).
  const pairRatios: number[] = [];
  for (let i = 0; i < PAIRS; i++) {
    const stream = await ctx.measureStream();
    const t = await timeDecode(shuffledPlan, { samples: 1, warmup: 0 });
    pairRatios.push(kvBytes / (t.ms / 1000) / 1e9 / stream);
  }
  pairRatios.sort((a, b) => a - b);
  const decodeVsStream = pairRatios[pairRatios.length >> 1]!;
  ctx.log(
    `decode (${decode.kernel} kernel): batch ${parts * seqsPerCache} × context ${context}, GQA 32/8, d128, f16, shuffled blocks: ${tShuffled.ms.toFixed(1)} ms → ${decodeGbps.toFixed(2)} GB/s (${decodeVsStream.toFixed(2)} of stream, paired); contiguous ${tContiguous.ms.toFixed(1)} ms`,
  );
  contiguousPlan.release();
  const decodeSplits = shuffledPlan.numSplits;
  shuffledPlan.release();

  // Fraction of the stream ceiling `kernel` reaches on the batch (shuffled tables) with a
  // forced split count, over `cacheBuffers` holding `bytes` of K/V; the ceiling is measured
  // again just before, as for the headline pairs.
  const sweepRatio = async (
    kernel: PagedDecodeAttention,
    numSplits: number,
    cacheBuffers: readonly GPUBuffer[],
    bytes: number,
  ): Promise<number> => {
    const plan = kernel.plan({
      blockTables: shuffled,
      contextLens,
      numSeqs: seqsPerCache,
      maxBlocksPerSeq: blocksPerSeq,
      numSplits,
    });
    const stream = await ctx.measureStream();
    const t = await medianMs(
      gpu,
      (e) => {
        for (const kvCache of cacheBuffers) kernel.encode(e, { plan, query, kvCache, output });
      },
      { samples },
    );
    plan.release();
    return round(bytes / (t.ms / 1000) / 1e9 / stream);
  };

  // On hardware, the same batch under each kernel and split count, so that the defaults rest on
  // figures from the adapter (software adapters would take minutes).
  const sweep: Record<string, number> = {};
  if (!gpu.isSoftware && !small) {
    for (const tuning of [
      { kernel: 'tiled', queryInRegisters: false, vChunksPerLane: 4 },
      { kernel: 'hardware' },
    ] as const) {
      const kernel = await PagedDecodeAttention.create(gpu, CONFIG, tuning);
      const name = tuning.kernel === 'hardware' ? 'hw' : 'tiled_qr0';
      for (const numSplits of [1, 2, 4]) {
        sweep[`sweep_decode_${name}_s${numSplits}`] = await sweepRatio(
          kernel,
          numSplits,
          caches,
          kvBytes,
        );
      }
    }
    // The subgroup kernel (opt-in until these figures say otherwise), where the adapter has
    // subgroups: 128 invocations per workgroup, so more splits to fill the device.
    // Keys per step 4 is the default (sweep_decode_sg_s*); 2 and 8 trade registers for loads in
    // flight (sweep_decode_sg_u2_s*, _u8_s*).
    if (gpu.features.has('subgroups')) {
      for (const keys of [4, 2, 8] as const) {
        const kernel = await PagedDecodeAttention.create(gpu, CONFIG, {
          kernel: 'subgroup',
          subgroupKeysPerStep: keys,
        });
        for (const numSplits of [1, 2, 4, 8]) {
          const name = keys === 4 ? 'sg' : `sg_u${keys}`;
          sweep[`sweep_decode_${name}_s${numSplits}`] = await sweepRatio(
            kernel,
            numSplits,
            caches,
            kvBytes,
          );
        }
      }
    }
    // Where the hardware kernel's time goes: the same KV bytes with a quarter of the arithmetic
    // (MHA, one query head per KV head), and twice the bytes with no f16 conversions (f32).
    const variants: [string, PagedAttentionConfig][] = [
      ['mha', { ...CONFIG, numQHeads: CONFIG.numKvHeads }],
      ['f32', { ...CONFIG, format: f32Format }],
    ];
    for (const [name, config] of variants) {
      const l = kvCacheLayout(config);
      const cache = fillCache(gpu, blocksPerCache * l.bytesPerBlock, 5);
      const kernel = await PagedDecodeAttention.create(gpu, config, { kernel: 'hardware' });
      const bytes = (seqsPerCache * context * l.bytesPerBlock) / CONFIG.blockSize;
      for (const numSplits of [1, 4]) {
        sweep[`ablate_${name}_s${numSplits}`] = await sweepRatio(kernel, numSplits, [cache], bytes);
      }
      gpu.releaseBuffer(cache);
    }
  }
  if (gpu.isSoftware && !small) {
    // The kernel software adapters ran before the software-shaped one, for the README's account.
    const tiled = await PagedDecodeAttention.create(gpu, CONFIG, { kernel: 'tiled' });
    sweep.sweep_decode_tiled_s1 = await sweepRatio(tiled, 1, caches, kvBytes);
    if (gpu.features.has('subgroups')) {
      // A software adapter with subgroups (lavapipe): the subgroup kernel beside the others.
      const sg = await PagedDecodeAttention.create(gpu, CONFIG, { kernel: 'subgroup' });
      sweep.sweep_decode_sg_s1 = await sweepRatio(sg, 1, caches, kvBytes);
    }
  }
  if (!gpu.isSoftware && !small) {
    // The headline figure again, last: drift between the two says how far to trust the sweep.
    sweep.decode_vs_stream_again = round(
      kvBytes / ((await timeDecode(planFor(shuffled))).ms / 1000) / 1e9 / ctx.streamReadGbps,
    );
  }
  for (const c of caches) gpu.releaseBuffer(c);
  gpu.releaseBuffer(query);
  gpu.releaseBuffer(output);

  // --- decode_split_k_gain: batch 1 × context 16,384 with and without split-K. ---
  const longContext = small ? 4096 : 16384;
  const longBlocks = longContext / CONFIG.blockSize;
  const longCache = fillCache(gpu, longBlocks * layout.bytesPerBlock, 9);
  const longQuery = gpu.storageBuffer(randomFloats(rng, rowFloats));
  const longOut = gpu.storageBuffer(rowFloats * 4);
  const longTables = Uint32Array.from(shuffledRange(rng, longBlocks));
  const longBatch = {
    blockTables: longTables,
    contextLens: Uint32Array.of(longContext),
    numSeqs: 1,
    maxBlocksPerSeq: longBlocks,
  };
  const onePlan = decode.plan({ ...longBatch, numSplits: 1 });
  const splitPlan = decode.plan(longBatch);
  const timeLong = (plan: PagedDecodePlan) =>
    medianMs(
      gpu,
      (e) => decode.encode(e, { plan, query: longQuery, kvCache: longCache, output: longOut }),
      { samples },
    );
  const tOne = await timeLong(onePlan);
  const tSplit = await timeLong(splitPlan);
  ctx.log(
    `decode batch 1 × ${longContext}: one split ${tOne.ms.toFixed(1)} ms, ${splitPlan.numSplits} splits ${tSplit.ms.toFixed(1)} ms`,
  );
  const splits = splitPlan.numSplits;
  onePlan.release();
  splitPlan.release();
  for (const b of [longCache, longQuery, longOut]) gpu.releaseBuffer(b);

  // --- prefill_tflops: one 2,048-token causal prefill (d128, f16; GQA 32/8 on hardware, 8/2 on
  // software adapters, which would take minutes for the full head count). ---
  const prefillConfig = gpu.isSoftware ? { ...CONFIG, numQHeads: 8, numKvHeads: 2 } : CONFIG;
  const prefillRow = prefillConfig.numQHeads * prefillConfig.headDim;
  const prefill = await PagedPrefillAttention.create(gpu, prefillConfig);
  const prefillLayout = kvCacheLayout(prefillConfig);
  const promptLen = small ? 512 : 2048;
  const promptBlocks = promptLen / CONFIG.blockSize;
  const promptCache = fillCache(gpu, promptBlocks * prefillLayout.bytesPerBlock, 11);
  const promptQuery = gpu.storageBuffer(randomFloats(rng, promptLen * prefillRow));
  const promptOut = gpu.storageBuffer(promptLen * prefillRow * 4);
  // One causal prefill of the whole prompt over shuffled blocks, median time.
  const timePrefill = async (kernel: PagedPrefillAttention, samples: number) => {
    const plan = kernel.plan({
      blockTables: Uint32Array.from(shuffledRange(rng, promptBlocks)),
      queryStarts: Uint32Array.of(0),
      queryLens: Uint32Array.of(promptLen),
      contextLens: Uint32Array.of(promptLen),
      numSeqs: 1,
      maxBlocksPerSeq: promptBlocks,
      numTokens: promptLen,
    });
    const t = await medianMs(
      gpu,
      (e) =>
        kernel.encode(e, { plan, query: promptQuery, kvCache: promptCache, output: promptOut }),
      { samples },
    );
    plan.release();
    return t;
  };
  const tPrefill = await timePrefill(prefill, gpu.isSoftware || small ? 1 : 5);
  // QKᵀ and PV over the causal triangle: 2 × 2 × d FLOPs per (query, visible key) per head.
  const flops =
    4 * prefillConfig.headDim * prefillConfig.numQHeads * ((promptLen * (promptLen + 1)) / 2);
  const tflops = flops / (tPrefill.ms / 1000) / 1e12;
  ctx.log(
    `prefill ${promptLen} tokens: ${tPrefill.ms.toFixed(0)} ms → ${(tflops * 1000).toFixed(2)} GFLOP/s`,
  );
  if (gpu.isSoftware && !small) {
    // The kernel software adapters ran before the software-shaped one.
    const tiled = await PagedPrefillAttention.create(gpu, prefillConfig, { kernel: 'tiled' });
    const t = await timePrefill(tiled, 1);
    sweep.sweep_prefill_tiled_tflops = round(flops / (t.ms / 1000) / 1e12, 5);
  }
  if (!gpu.isSoftware && !small) {
    for (const tuning of [
      { queryInRegisters: true, vChunksPerLane: 4 },
      { queryInRegisters: false, vChunksPerLane: 4 },
      { queryInRegisters: false, vChunksPerLane: 2 },
    ] as const) {
      const kernel = await PagedPrefillAttention.create(gpu, prefillConfig, tuning);
      const t = await timePrefill(kernel, 5);
      const key = `sweep_prefill_qr${tuning.queryInRegisters ? 1 : 0}_v${tuning.vChunksPerLane}_tflops`;
      sweep[key] = round(flops / (t.ms / 1000) / 1e12, 4);
    }
  }
  for (const b of [promptCache, promptQuery, promptOut]) gpu.releaseBuffer(b);

  return {
    decode_kernel: decode.kernel,
    decode_splits: decodeSplits,
    decode_batch: parts * seqsPerCache,
    decode_context: context,
    decode_ms: round(tShuffled.ms),
    decode_gbps: round(decodeGbps),
    decode_vs_stream: round(decodeVsStream),
    decode_vs_stream_pairs: pairRatios.map((r) => round(r)).join(' '),
    decode_vs_stream_unpaired: round(decodeGbps / ctx.streamReadGbps),
    paged_vs_contiguous: round(tShuffled.ms / tContiguous.ms),
    decode_split_k_context: longContext,
    decode_split_k_splits: splits,
    decode_split_k_gain: round(tOne.ms / tSplit.ms),
    prefill_kernel: prefill.kernel,
    prefill_tokens: promptLen,
    prefill_heads: `${prefillConfig.numQHeads}/${prefillConfig.numKvHeads}`,
    prefill_ms: round(tPrefill.ms),
    prefill_tflops: round(tflops, 5),
    attention_timing_source: tShuffled.source,
    ...sweep,
  };
};
