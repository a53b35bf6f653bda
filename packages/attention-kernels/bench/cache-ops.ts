// write_kv_gbps / write_kv_vs_stream and copy_blocks_gbps / copy_blocks_vs_stream: the cache
// maintenance kernels' bandwidth (bytes read + written) beside the streaming-read ceiling.

import { randomFloats, seededRandom } from '@kvasir/test-utils';
import { CopyBlocks } from '../src/copy-blocks/copy-blocks.js';
import { f16Format } from '../src/kv-format/float.js';
import { kvCacheLayout } from '../src/layout.js';
import { shuffledRange } from '../src/testing/random.js';
import { WriteKvCache } from '../src/write-kv-cache/write-kv-cache.js';
import { type BenchSection, medianMs } from './harness.js';
import { round } from './stream.js';

export const cacheOpsSection: BenchSection = async (ctx) => {
  const { gpu } = ctx;
  const small = gpu.isSoftware || ctx.quick;
  const config = { numKvHeads: 8, headDim: 128, blockSize: 16, format: f16Format };
  const layout = kvCacheLayout(config);
  const numTokens = small ? 512 : 8192;
  const numBlocks = (numTokens / config.blockSize) * 2;
  const rng = seededRandom(1);
  const rows = numTokens * config.numKvHeads * config.headDim;
  const key = gpu.storageBuffer(randomFloats(rng, rows));
  const value = gpu.storageBuffer(randomFloats(rng, rows));
  const slots = Int32Array.from(
    shuffledRange(rng, numBlocks * config.blockSize).slice(0, numTokens),
  );
  const slotMapping = gpu.storageBuffer(slots);
  const kvCache = gpu.storageBuffer(numBlocks * layout.bytesPerBlock);
  const write = await WriteKvCache.create(gpu, config);
  const args = { key, value, slotMapping, kvCache, numTokens };
  const tw = await medianMs(gpu, (e) => write.encode(e, args), { samples: small ? 3 : 7 });
  // f32 K and V read, f16 K and V written.
  const writeBytes = rows * 2 * 4 + rows * 2 * 2;
  const writeGbps = writeBytes / (tw.ms / 1000) / 1e9;
  ctx.log(`write_kv: ${numTokens} tokens in ${tw.ms.toFixed(2)} ms → ${writeGbps.toFixed(2)} GB/s`);

  // Copies over a cache larger than CPU caches, so they stream from memory like attention does.
  const copy = await CopyBlocks.create(gpu, config);
  const copyBlocks = small ? 512 : 8192;
  const copyCache = gpu.storageBuffer(copyBlocks * layout.bytesPerBlock);
  const order = shuffledRange(rng, copyBlocks);
  const half = copyBlocks / 2;
  const pairs = Array.from(
    { length: half },
    (_, i) => [order[i]!, order[half + i]!] as [number, number],
  );
  const tc = await medianMs(gpu, (e) => copy.encode(e, { kvCache: copyCache, pairs }), {
    samples: small ? 3 : 7,
  });
  const copyBytes = half * layout.bytesPerBlock * 2;
  const copyGbps = copyBytes / (tc.ms / 1000) / 1e9;
  ctx.log(`copy_blocks: ${half} blocks in ${tc.ms.toFixed(2)} ms → ${copyGbps.toFixed(2)} GB/s`);
  for (const b of [key, value, slotMapping, kvCache, copyCache]) gpu.releaseBuffer(b);
  return {
    write_kv_gbps: round(writeGbps),
    write_kv_vs_stream: round(writeGbps / ctx.streamReadGbps),
    copy_blocks_gbps: round(copyGbps),
    copy_blocks_vs_stream: round(copyGbps / ctx.streamReadGbps),
  };
};
