import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { EngineStats } from './engine-stats.js';
import type { FinishReason } from './generation-events.js';

const LATENCY_BUCKETS = [
  0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80,
];
const TPOT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.5, 1, 2.5];

/**
 * The server's Prometheus metrics. Engine-side figures are read from `stats()` at scrape time
 * (so they are never stale); request latencies and token counts are recorded as requests end.
 * Each server has its own registry, so several servers can live in one process.
 */
export class ServerMetrics {
  /** The registry `/metrics` serializes. */
  readonly registry = new Registry();
  readonly #ttft: Histogram;
  readonly #tpot: Histogram;
  readonly #e2e: Histogram;
  readonly #promptTokens: Counter;
  readonly #generationTokens: Counter;
  readonly #finished: Counter<'finish_reason'>;
  readonly #errors: Counter<'code'>;
  readonly #stats: () => EngineStats;
  #snapshot: EngineStats | undefined;

  constructor(stats: () => EngineStats) {
    const registers = [this.registry];
    this.#stats = stats;
    // One stats() call per scrape (taken in render()), shared by every collector below.
    const current = (): EngineStats => {
      this.#snapshot ??= stats();
      return this.#snapshot;
    };
    /** A counter mirroring a monotonic total the engine keeps. */
    const mirror = <L extends string>(
      name: string,
      help: string,
      labelNames: readonly L[],
      read: (s: EngineStats) => Iterable<[Partial<Record<L, string>>, number]>,
    ) =>
      new Counter<L>({
        name,
        help,
        labelNames,
        registers,
        collect() {
          this.reset();
          for (const [labels, value] of read(current())) this.inc(labels, Math.max(0, value));
        },
      });

    new Gauge({
      name: 'kvasir_kv_cache_usage_ratio',
      help: 'Fraction of KV-cache blocks referenced by running sequences (0..1).',
      registers,
      collect() {
        this.set(current().kvCacheUsage);
      },
    });
    new Gauge<'state'>({
      name: 'kvasir_kv_blocks',
      help: 'KV-cache blocks by state: used (referenced), cached (reusable prefix), free, total.',
      labelNames: ['state'],
      registers,
      collect() {
        const b = current().blocks;
        this.set({ state: 'used' }, b.used);
        this.set({ state: 'cached' }, b.cached);
        this.set({ state: 'free' }, b.free);
        this.set({ state: 'total' }, b.total);
      },
    });
    new Gauge<'state'>({
      name: 'kvasir_requests',
      help: 'Requests in the scheduler by state: running, waiting, preempted.',
      labelNames: ['state'],
      registers,
      collect() {
        const r = current().requests;
        this.set({ state: 'running' }, r.running);
        this.set({ state: 'waiting' }, r.waiting);
        this.set({ state: 'preempted' }, r.preempted);
      },
    });
    // The Model Server Protocol of the Gateway API Inference Extension: an endpoint picker
    // scrapes queue depth, running requests and KV-cache use under vLLM's names (its default
    // configuration), plus block size and block count as labels of an info series. Same types
    // and meanings as vLLM's: gauges, usage a fraction in 0..1 despite the `_perc` suffix.
    new Gauge({
      name: 'vllm:num_requests_waiting',
      help: 'Requests waiting to be scheduled (Model Server Protocol: TotalQueuedRequests).',
      registers,
      collect() {
        this.set(current().requests.waiting);
      },
    });
    new Gauge({
      name: 'vllm:num_requests_running',
      help: 'Requests being served in engine steps (Model Server Protocol: TotalRunningRequests).',
      registers,
      collect() {
        this.set(current().requests.running);
      },
    });
    new Gauge({
      name: 'vllm:kv_cache_usage_perc',
      help: 'KV-cache usage, 1 meaning 100 percent (Model Server Protocol: KVCacheUtilization).',
      registers,
      collect() {
        this.set(current().kvCacheUsage);
      },
    });
    new Gauge<'block_size' | 'num_gpu_blocks'>({
      name: 'vllm:cache_config_info',
      help: 'KV-cache configuration as labels, value 1 (Model Server Protocol: BlockSize, NumBlocks).',
      labelNames: ['block_size', 'num_gpu_blocks'],
      registers,
      collect() {
        this.reset();
        const s = current();
        if (s.blockSize === undefined) return;
        this.set({ block_size: String(s.blockSize), num_gpu_blocks: String(s.blocks.total) }, 1);
      },
    });
    mirror(
      'kvasir_prefix_cache_queries_total',
      'Prompt tokens looked up in the prefix cache.',
      [],
      (s) => [[{}, s.prefixCache.queries]],
    );
    mirror(
      'kvasir_prefix_cache_hits_total',
      'Prompt tokens found in the prefix cache.',
      [],
      (s) => [[{}, s.prefixCache.hits]],
    );
    mirror('kvasir_preemptions_total', 'Preempted sequences by mode.', ['mode'], (s) =>
      Object.entries(s.preemptions).map(([mode, v]) => [{ mode }, v]),
    );
    mirror('kvasir_offload_hits_total', 'KV blocks found in an offload tier.', ['tier'], (s) =>
      Object.entries(s.offloadHits).map(([tier, v]) => [{ tier }, v]),
    );
    mirror(
      'kvasir_kv_cache_evictions_total',
      'Cached prefix blocks reclaimed by the eviction policy.',
      [],
      (s) => (s.evictions === undefined ? [] : [[{}, s.evictions]]),
    );
    mirror(
      'kvasir_kv_compression_dropped_tokens_total',
      'Cached tokens dropped by token-level KV compression, by policy.',
      ['policy'],
      (s) =>
        Object.entries(s.kvCompression ?? {}).map(([policy, v]) => [{ policy }, v.tokensDropped]),
    );
    new Gauge<'policy'>({
      name: 'kvasir_kv_compression_blocks_held',
      help: 'KV blocks held by requests whose cache a compression policy bounds, by policy.',
      labelNames: ['policy'],
      registers,
      collect() {
        this.reset();
        for (const [policy, v] of Object.entries(current().kvCompression ?? {})) {
          this.set({ policy }, v.blocksHeld);
        }
      },
    });
    mirror(
      'kvasir_engine_failed_steps_total',
      'Engine steps that failed; their requests ended with an error and the engine went on.',
      [],
      (s) => (s.failures === undefined ? [] : [[{}, s.failures.steps]]),
    );
    mirror(
      'kvasir_stalled_streams_total',
      'Streaming requests ended because their client stopped reading (unread output past the bound).',
      [],
      (s) => (s.stalledStreams === undefined ? [] : [[{}, s.stalledStreams]]),
    );
    mirror(
      'kvasir_engine_failed_requests_total',
      'Requests ended with an error by a failed step.',
      [],
      (s) => (s.failures === undefined ? [] : [[{}, s.failures.requests]]),
    );
    for (const [what, name] of [
      ['blocks', 'kvasir_kv_group_blocks'],
      ['tokens', 'kvasir_kv_group_tokens'],
    ] as const) {
      new Gauge<'group' | 'window'>({
        name,
        help: `KV ${what} the live sequences hold in each KV cache group (window: its sliding window, or "full").`,
        labelNames: ['group', 'window'],
        registers,
        collect() {
          this.reset();
          for (const [g, v] of (current().kvGroups ?? []).entries()) {
            this.set(
              { group: String(g), window: v.window === null ? 'full' : String(v.window) },
              v[what],
            );
          }
        },
      });
    }
    new Gauge<'tier'>({
      name: 'kvasir_offload_tier_up',
      help: 'Whether an offload tier that can be disconnected (Redis) is reachable: 1 or 0.',
      labelNames: ['tier'],
      registers,
      collect() {
        this.reset();
        for (const t of current().offloadTiers ?? []) {
          if (t.connected !== undefined) this.set({ tier: t.tier }, t.connected ? 1 : 0);
        }
      },
    });
    const perTier = (
      name: string,
      help: string,
      read: (t: NonNullable<EngineStats['offloadTiers']>[number]) => number,
    ) =>
      mirror(name, help, ['tier'], (s) =>
        (s.offloadTiers ?? []).map((t) => [{ tier: t.tier }, read(t)]),
      );
    perTier(
      'kvasir_offload_misses_total',
      'Lookups an offload tier could not serve.',
      (t) => t.misses,
    );
    perTier(
      'kvasir_offload_corrupt_entries_total',
      'Offload entries refused on read (truncated, checksum mismatch) and deleted.',
      (t) => t.corrupt,
    );
    perTier(
      'kvasir_offload_foreign_entries_total',
      'Offload entries of another namespace or key, deleted on read.',
      (t) => t.foreign,
    );
    perTier(
      'kvasir_offload_errors_total',
      'Offload backend failures (I/O errors, timeouts, Redis unreachable), each a miss or a skipped write.',
      (t) => t.errors,
    );
    perTier(
      'kvasir_offload_evictions_total',
      'Offload entries reclaimed to stay within the tier budget.',
      (t) => t.evictions,
    );

    this.#ttft = new Histogram({
      name: 'kvasir_time_to_first_token_seconds',
      help: 'Time from request arrival to its first generated token.',
      buckets: LATENCY_BUCKETS,
      registers,
    });
    this.#tpot = new Histogram({
      name: 'kvasir_time_per_output_token_seconds',
      help: 'Mean time between generated tokens after the first, per request.',
      buckets: TPOT_BUCKETS,
      registers,
    });
    this.#e2e = new Histogram({
      name: 'kvasir_e2e_request_latency_seconds',
      help: 'Time from request arrival to its last token.',
      buckets: LATENCY_BUCKETS,
      registers,
    });
    this.#promptTokens = new Counter({
      name: 'kvasir_prompt_tokens_total',
      help: 'Prompt tokens of admitted requests.',
      registers,
    });
    this.#generationTokens = new Counter({
      name: 'kvasir_generation_tokens_total',
      help: 'Generated tokens.',
      registers,
    });
    this.#finished = new Counter<'finish_reason'>({
      name: 'kvasir_requests_finished_total',
      help: 'Finished requests by the finish reason of their first choice.',
      labelNames: ['finish_reason'],
      registers,
    });
    this.#errors = new Counter<'code'>({
      name: 'kvasir_request_errors_total',
      help: 'Requests answered with an error, by OpenAI error code.',
      labelNames: ['code'],
      registers,
    });
  }

  /** The Prometheus text exposition, with engine figures read once for this scrape. */
  async render(): Promise<string> {
    this.#snapshot = this.#stats();
    try {
      return await this.registry.metrics();
    } finally {
      this.#snapshot = undefined;
    }
  }

  /** Records one finished request. Times are in seconds since its arrival. */
  observeRequest(r: {
    promptTokens: number;
    generatedTokens: number;
    firstTokenAt: number | undefined;
    lastTokenAt: number | undefined;
    tokensOfSlowestChoice: number;
    finishReason: FinishReason;
  }): void {
    this.#promptTokens.inc(r.promptTokens);
    this.#generationTokens.inc(r.generatedTokens);
    this.#finished.inc({ finish_reason: r.finishReason });
    if (r.firstTokenAt === undefined || r.lastTokenAt === undefined) return;
    this.#ttft.observe(r.firstTokenAt);
    this.#e2e.observe(r.lastTokenAt);
    if (r.tokensOfSlowestChoice > 1) {
      this.#tpot.observe((r.lastTokenAt - r.firstTokenAt) / (r.tokensOfSlowestChoice - 1));
    }
  }

  /** Counts an error response. */
  observeError(code: string): void {
    this.#errors.inc({ code });
  }
}
