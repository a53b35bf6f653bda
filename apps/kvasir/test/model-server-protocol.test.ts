import parsePrometheusTextFormat from 'parse-prometheus-text-format';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RANDOM_MODEL_NAME } from '../src/default-model.js';
import { eventually, type ServerProcess, startServer } from './harness.js';

// An endpoint picker (Gateway API Inference Extension) scrapes `/metrics` as Prometheus text and
// reads metric families by name and type: here the same, with a strict text-format parser
// instead of the harness's line splitter, so a malformed exposition or a wrong type fails.

interface Family {
  readonly name: string;
  readonly type: string;
  readonly metrics: readonly { readonly value: string; readonly labels?: Record<string, string> }[];
}

let server: ServerProcess;

beforeAll(async () => {
  // Two sequences per step and 40 blocks of 16 tokens: eight long requests queue up.
  server = await startServer([
    '--backend',
    'cpu',
    '--max-num-seqs',
    '2',
    '--block-size',
    '16',
    '--num-gpu-blocks',
    '40',
  ]);
});

afterAll(async () => {
  expect(await server.stop()).toBe(0);
});

async function scrape(): Promise<Map<string, Family>> {
  const res = await fetch(`${server.url}/metrics`);
  expect(res.status).toBe(200);
  expect(res.headers.get('content-type')).toMatch(/^text\/plain/);
  const families = parsePrometheusTextFormat(await res.text()) as Family[];
  return new Map(families.map((f) => [f.name, f]));
}

/** The single value of a gauge family, checking its type as the endpoint picker does. */
function gauge(families: Map<string, Family>, name: string): number {
  const f = families.get(name);
  expect(f, name).toBeDefined();
  expect(f!.type).toBe('GAUGE');
  expect(f!.metrics).toHaveLength(1);
  return Number(f!.metrics[0]!.value);
}

describe('Model Server Protocol metrics (vLLM names) on a real kvasir serve', () => {
  it('exposes the queue, running, KV-usage gauges and the cache config labels at rest', async () => {
    const m = await scrape();
    expect(gauge(m, 'vllm:num_requests_waiting')).toBe(0);
    expect(gauge(m, 'vllm:num_requests_running')).toBe(0);
    expect(gauge(m, 'vllm:kv_cache_usage_perc')).toBe(0);
    const info = m.get('vllm:cache_config_info');
    expect(info?.type).toBe('GAUGE');
    expect(info?.metrics).toEqual([
      { value: '1', labels: { block_size: '16', num_gpu_blocks: '40' } },
    ]);
    // Kvasir's own names stay beside them, and agree.
    expect(
      Number(m.get('kvasir_kv_blocks')?.metrics.find((x) => x.labels?.state === 'total')?.value),
    ).toBe(40);
  });

  it('moves with load: requests queue beyond --max-num-seqs, KV usage rises, then all return to 0', async () => {
    const requests = Array.from({ length: 8 }, (_, i) =>
      server.client.completions.create({
        model: RANDOM_MODEL_NAME,
        prompt: `request ${i} asks for a long answer about paged attention`,
        max_tokens: 48,
        temperature: 0,
        ignore_eos: true,
      } as never),
    );
    let sawWaiting = 0;
    let sawRunning = 0;
    let sawUsage = 0;
    const loaded = await eventually(async () => {
      const m = await scrape();
      const waiting = gauge(m, 'vllm:num_requests_waiting');
      const running = gauge(m, 'vllm:num_requests_running');
      const usage = gauge(m, 'vllm:kv_cache_usage_perc');
      expect(running).toBeLessThanOrEqual(2);
      expect(usage).toBeGreaterThanOrEqual(0);
      expect(usage).toBeLessThanOrEqual(1);
      // What the picker reads is what the server says in its own names at the same scrape.
      const own = m.get('kvasir_requests')!.metrics;
      expect(Number(own.find((x) => x.labels?.state === 'running')!.value)).toBe(running);
      expect(Number(own.find((x) => x.labels?.state === 'waiting')!.value)).toBe(waiting);
      expect(Number(m.get('kvasir_kv_cache_usage_ratio')!.metrics[0]!.value)).toBe(usage);
      sawWaiting = Math.max(sawWaiting, waiting);
      sawRunning = Math.max(sawRunning, running);
      sawUsage = Math.max(sawUsage, usage);
      return sawWaiting > 0 && sawRunning === 2 && sawUsage > 0;
    }, 400);
    await Promise.all(requests);
    expect({ loaded, sawWaiting, sawRunning, sawUsage: sawUsage > 0 }).toEqual({
      loaded: true,
      sawWaiting: expect.any(Number),
      sawRunning: 2,
      sawUsage: true,
    });
    expect(sawWaiting).toBeGreaterThan(0);
    expect(
      await eventually(async () => {
        const m = await scrape();
        return (
          gauge(m, 'vllm:num_requests_waiting') === 0 &&
          gauge(m, 'vllm:num_requests_running') === 0 &&
          gauge(m, 'vllm:kv_cache_usage_perc') === 0
        );
      }),
    ).toBe(true);
  });
});
