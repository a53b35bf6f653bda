// Serving-capacity benchmark: the highest Poisson request rate each system sustains under a
// mean normalized latency bound, for OPT-13B on one A100-40GB with a ShareGPT-like workload
// (the PagedAttention paper's setting). All figures come from one deterministic run.
// `pnpm --filter @kvasir/scheduler bench --json` prints one JSON object.
import { KvCacheManager } from '@kvasir/kv-allocator';
import { seededRandom } from '@kvasir/test-utils';
import { type KvCompressionSpec, parseKvCompression, Scheduler } from '../src/index.js';
import {
  findMaxRate,
  HARDWARE,
  kvCapacity,
  MODELS,
  StepCostModel,
  type SystemKind,
  simulate,
} from '../src/sim/index.js';

const json = process.argv.includes('--json');
const LATENCY_BOUND = 0.1; // s per output token, mean over requests
const NUM_REQUESTS = 1000;
const base = {
  model: 'OPT-13B',
  hardware: 'A100-40GB',
  workload: { kind: 'sharegpt', numRequests: NUM_REQUESTS, seed: 1 },
  latencyBound: LATENCY_BOUND,
  iterations: 7,
} as const;

const t0 = performance.now();
const rates: Record<SystemKind, number> = { kvasir: 0, orca: 0, static: 0 };
const batch: Record<SystemKind, number> = { kvasir: 0, orca: 0, static: 0 };
for (const system of ['kvasir', 'orca', 'static'] as const) {
  const r = findMaxRate({ ...base, system, initialRate: 0.5 });
  rates[system] = r.maxRate;
  batch[system] = r.atMaxRate?.meanBatchSize ?? 0;
  if (!json) {
    console.log(
      `${system.padEnd(7)} max rate ${r.maxRate.toFixed(3)} req/s (mean batch ${batch[system].toFixed(1)}, ${r.probes.length} probes)`,
    );
  }
}

// Prefix caching on a shared 512-token system prompt, same rate, with and without it.
const shared = { kind: 'shared-prefix', numRequests: 400, seed: 2, rate: 8 } as const;
const withCache = simulate({ model: 'OPT-13B', hardware: 'A100-40GB', workload: shared });
const noCache = simulate({
  model: 'OPT-13B',
  hardware: 'A100-40GB',
  workload: shared,
  enablePrefixCaching: false,
});

// Host cost of one schedule() + update() with 256 running decodes (context ~512), against the
// roofline time of that same step for Llama-3-8B on an H100: the scheduler's share of a step.
// With `kvCompression`, every request compresses (a window under its context: a block is
// dropped, and the kept ones shifted, every 16 steps per request).
function schedulerStepMicros(kvCompression?: KvCompressionSpec): {
  medianUs: number;
  gpuStepUs: number;
} {
  const kv = new KvCacheManager({ numBlocks: 256 * 40, blockSize: 16 });
  const sched = new Scheduler({
    kvCache: kv,
    maxModelLen: 4096,
    maxNumSeqs: 256,
    maxNumBatchedTokens: 8192,
  });
  const random = seededRandom(12345);
  for (let r = 0; r < 256; r++) {
    const prompt = new Int32Array(512);
    for (let i = 0; i < 512; i++) prompt[i] = Math.floor(random() * 32000);
    sched.add({
      id: `r${r}`,
      promptTokenIds: prompt,
      maxTokens: 3000,
      ignoreEos: true,
      ...(kvCompression ? { kvCompression } : {}),
    });
  }
  const stepOnce = () => {
    const plan = sched.schedule();
    // The kernels' part: some attention mass for policies that read it.
    for (const row of plan.rows) row.attentionMass?.fill(1, 0, Math.ceil(row.contextLen / 16));
    sched.update({
      seqIds: plan.sampleSeqIds,
      tokenIds: new Int32Array(plan.sampleSeqIds.length).fill(5),
    });
    return plan;
  };
  for (let i = 0; i < 100; i++) stepOnce(); // prefill and warm-up
  const times: number[] = [];
  let last = stepOnce();
  for (let i = 0; i < 300; i++) {
    const t = performance.now();
    last = stepOnce();
    times.push((performance.now() - t) * 1000);
  }
  times.sort((a, b) => a - b);
  const cm = new StepCostModel(MODELS['Llama-3-8B'], HARDWARE['H100-80GB']);
  const gpu = cm.cost({
    numRows: last.rows.length,
    queryLen: (r) => last.rows[r]!.queryLen,
    contextLen: (r) => last.contextLens[r]!,
    swapBlocks: 0,
  });
  return { medianUs: times[times.length >> 1]!, gpuStepUs: gpu.seconds * 1e6 };
}
const overhead = schedulerStepMicros();
const sinksOverhead = schedulerStepMicros(parseKvCompression('sinks:sinks=4,window=508'));
const h2oOverhead = schedulerStepMicros(parseKvCompression('h2o:budget=512'));

const cap = kvCapacity('OPT-13B', 'A100-40GB');
const round = (x: number, d = 3) => Math.round(x * 10 ** d) / 10 ** d;
const out = {
  model: 'OPT-13B',
  hardware: 'A100-40GB',
  workload: 'sharegpt-like',
  num_requests: NUM_REQUESTS,
  latency_bound_s_per_token: LATENCY_BOUND,
  kv_tokens: cap.kvTokens,
  max_rate_kvasir: round(rates.kvasir),
  max_rate_orca: round(rates.orca),
  max_rate_static: round(rates.static),
  kvasir_vs_orca: round(rates.kvasir / rates.orca, 2),
  kvasir_vs_static: round(rates.kvasir / rates.static, 2),
  mean_batch_kvasir: round(batch.kvasir, 1),
  mean_batch_orca: round(batch.orca, 1),
  shared_prefix_hit_rate: round(withCache.prefixHitRate),
  shared_prefix_latency_gain: round(
    noCache.meanNormalizedLatencyS / withCache.meanNormalizedLatencyS,
    2,
  ),
  scheduler_step_us_256_decodes: round(overhead.medianUs, 0),
  scheduler_vs_h100_step: round(overhead.medianUs / overhead.gpuStepUs, 3),
  scheduler_step_us_256_decodes_sinks: round(sinksOverhead.medianUs, 0),
  scheduler_step_us_256_decodes_h2o: round(h2oOverhead.medianUs, 0),
  wall_s: round((performance.now() - t0) / 1000, 1),
};
if (json) console.log(JSON.stringify(out));
else console.log(out);
