// The @kvasir/attention-kernels benchmark: `pnpm --filter @kvasir/attention-kernels bench [--json] [--quick]`.
// Prints the adapter, then each section's figures; with --json, ONE JSON object.
//
// To add a section: write `bench/<name>.ts` exporting a `BenchSection` (see harness.ts), and
// add it to SECTIONS below. Sections run in order and see `ctx.streamReadGbps` (the ceiling
// measured first) to report ratios from the same run, e.g. decode_vs_stream.
import { createGpu } from '@kvasir/gpu';
import { attentionSection } from './attention.js';
import { cacheOpsSection } from './cache-ops.js';
import { compressionSection } from './compression.js';
import type { BenchContext, BenchSection } from './harness.js';
import { streamSection } from './stream.js';

const SECTIONS: [string, BenchSection][] = [
  ['stream', streamSection],
  ['cache-ops', cacheOpsSection],
  // decode_gbps, decode_vs_stream, paged_vs_contiguous, decode_split_k_gain, prefill_tflops.
  ['attention', attentionSection],
  // mass_vs_decode, shift_keys_gbps, shift_keys_vs_stream (KV compression).
  ['compression', compressionSection],
];

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  const json = args.includes('--json');
  const quick = args.includes('--quick');
  const only = args
    .find((a) => a.startsWith('--only='))
    ?.slice('--only='.length)
    .split(',');
  const gpu = await createGpu();
  const out: Record<string, unknown> = {
    adapter: gpu.adapterInfo,
    backend: gpu.backend,
    feature_level: gpu.featureLevel,
    is_software: gpu.isSoftware,
    timestamps: gpu.hasTimestamps,
  };
  const ctx: BenchContext = {
    gpu,
    quick,
    streamReadGbps: Number.NaN,
    measureStream: () => Promise.reject(new Error('the stream section has not run')),
    log: (m) => {
      if (!json) console.log(m);
    },
  };
  ctx.log(`adapter: ${gpu.describe()}`);
  try {
    for (const [name, section] of SECTIONS) {
      if (only !== undefined && name !== 'stream' && !only.includes(name)) continue;
      Object.assign(out, await section(ctx));
    }
  } finally {
    gpu.destroy();
  }
  if (json) console.log(JSON.stringify(out));
  else console.log(out);
}

await main();
