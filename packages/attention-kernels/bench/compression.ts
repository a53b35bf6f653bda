// KV-compression kernels: mass_vs_decode, the attention-mass pass's time over a
// decode step's for the same batch (what a policy that asks for mass every decode adds), and
// shift_keys_gbps / shift_keys_vs_stream, the key shift's bandwidth (K slabs read and written).
import { randomFloats, seededRandom } from '@kvasir/test-utils';
import { PagedAttentionMass } from '../src/attention/attention-mass.js';
import { PagedDecodeAttention } from '../src/decode/paged-decode.js';
import { f16Format } from '../src/kv-format/float.js';
import { kvCacheLayout } from '../src/layout.js';
import { ShiftKeys } from '../src/rope/shift-keys.js';
import { randomCache, shuffledRange } from '../src/testing/random.js';
import { type BenchSection, medianMs } from './harness.js';
import { round } from './stream.js';

const CONFIG = {
  numQHeads: 32,
  numKvHeads: 8,
  headDim: 128,
  blockSize: 16,
  format: f16Format,
} as const;

export const compressionSection: BenchSection = async (ctx) => {
  const { gpu } = ctx;
  const small = ctx.quick || gpu.isSoftware;
  const samples = small ? 3 : 10;
  const layout = kvCacheLayout(CONFIG);
  const rng = seededRandom(21);
  const batch = small ? 4 : 32;
  const context = small ? 512 : 2048;
  const blocksPerSeq = context / CONFIG.blockSize;
  const numBlocks = batch * blocksPerSeq;
  const cache = gpu.storageBuffer(randomCache(rng, layout, numBlocks), 'bench-kv-cache');
  const rowFloats = CONFIG.numQHeads * CONFIG.headDim;
  const query = gpu.storageBuffer(randomFloats(rng, batch * rowFloats));
  const output = gpu.storageBuffer(batch * rowFloats * 4);
  const blockTables = Uint32Array.from(shuffledRange(rng, numBlocks));
  const contextLens = new Uint32Array(batch).fill(context);
  const ones = new Uint32Array(batch).fill(1);
  const batchArgs = { blockTables, contextLens, numSeqs: batch, maxBlocksPerSeq: blocksPerSeq };

  const decode = await PagedDecodeAttention.create(gpu, CONFIG);
  const decodePlan = decode.plan(batchArgs);
  const td = await medianMs(
    gpu,
    (e) => decode.encode(e, { plan: decodePlan, query, kvCache: cache, output }),
    { samples },
  );
  const mass = await PagedAttentionMass.create(gpu, CONFIG);
  const massPlan = mass.plan({
    ...batchArgs,
    queryStarts: Uint32Array.from({ length: batch }, (_, i) => i),
    queryLens: ones,
    massQueries: ones,
    numTokens: batch,
  });
  const massOut = gpu.storageBuffer(batch * blocksPerSeq * 4);
  const tm = await medianMs(
    gpu,
    (e) => mass.encode(e, { plan: massPlan, query, kvCache: cache, massOut }),
    { samples },
  );
  ctx.log(
    `attention mass: batch ${batch} × ${context}: decode ${td.ms.toFixed(2)} ms, mass pass ${tm.ms.toFixed(2)} ms`,
  );

  // Shift a quarter of the cache's blocks (a window moving past a long prompt).
  const shift = await ShiftKeys.create(gpu, {
    ...CONFIG,
    rope: { ...CONFIG, style: 'rotate-half', theta: 500000, maxPosition: context },
  });
  const shifts = shuffledRange(rng, numBlocks)
    .slice(0, numBlocks / 4)
    .map((block) => ({ block, delta: -CONFIG.blockSize * 4 }));
  const packed = shift.upload(shifts);
  const ts = await medianMs(
    gpu,
    (e) => shift.encode(e, { kvCache: cache, shifts: packed, numShifts: shifts.length }),
    { samples },
  );
  // Each shifted block's K slabs are read once and written once.
  const kBytes = shifts.length * CONFIG.numKvHeads * CONFIG.blockSize * layout.rowWords * 4;
  const shiftGbps = (2 * kBytes) / (ts.ms / 1000) / 1e9;
  ctx.log(
    `shift keys: ${shifts.length} blocks in ${ts.ms.toFixed(2)} ms → ${shiftGbps.toFixed(2)} GB/s`,
  );
  decodePlan.release();
  massPlan.release();
  shift.destroy();
  for (const b of [cache, query, output, massOut, packed]) gpu.releaseBuffer(b);
  return {
    compression_batch: batch,
    compression_context: context,
    decode_ms: round(td.ms),
    mass_ms: round(tm.ms),
    mass_vs_decode: round(tm.ms / td.ms),
    shift_keys_blocks: shifts.length,
    shift_keys_ms: round(ts.ms),
    shift_keys_gbps: round(shiftGbps),
    shift_keys_vs_stream: round(shiftGbps / ctx.streamReadGbps),
  };
};
