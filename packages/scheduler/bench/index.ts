// Serving-capacity benchmark: the highest Poisson request rate each system sustains under a
// mean normalized latency bound, for OPT-13B on one A100-40GB with a ShareGPT-like workload
// (the PagedAttention paper's setting). All figures come from one deterministic run.
// `pnpm --filter @kvasir/scheduler bench --json` prints one JSON object.
import { findMaxRate, kvCapacity, type SystemKind, simulate } from '../src/sim/index';

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
  wall_s: round((performance.now() - t0) / 1000, 1),
};
if (json) console.log(JSON.stringify(out));
else console.log(out);
