import { describe, expect, it } from 'vitest';
import { findMaxRate, type RateProbe } from './capacity.js';

describe('findMaxRate: what ended the search', () => {
  it("says when the answer is only the search's upper bound, not a measured rate", () => {
    // 20 short requests all at once stay under a loose bound: no rate overloads them.
    const res = findMaxRate({
      model: 'OPT-13B',
      hardware: 'A100-40GB',
      workload: { kind: 'alpaca', numRequests: 20, seed: 1 },
      latencyBound: 10,
      maxRate: 64,
    });
    expect(res.maxRate).toBe(64);
    expect(res.limitedBy).toBe('max-rate');
  });

  it('says latency when a rate over the bound was found, and min-rate when none was under', () => {
    const bracketed = findMaxRate({
      model: 'OPT-13B',
      hardware: 'A100-40GB',
      workload: { kind: 'sharegpt', numRequests: 60, seed: 5 },
      latencyBound: 0.03,
      iterations: 2,
    });
    expect(bracketed.limitedBy).toBe('latency');
    const none = findMaxRate({
      model: 'OPT-13B',
      hardware: 'A100-40GB',
      workload: { kind: 'alpaca', numRequests: 10, seed: 1 },
      latencyBound: 0.001,
      minRate: 0.1,
    });
    expect(none.maxRate).toBe(0);
    expect(none.limitedBy).toBe('min-rate');
  });

  it('reports every probe as it is simulated', () => {
    const seen: (RateProbe & { underBound: boolean })[] = [];
    const res = findMaxRate({
      model: 'OPT-13B',
      hardware: 'A100-40GB',
      workload: { kind: 'sharegpt', numRequests: 60, seed: 5 },
      latencyBound: 0.03,
      iterations: 2,
      onProbe: (p) => seen.push(p),
    });
    expect(
      seen.map(({ rate, meanNormalizedLatencyS }) => ({ rate, meanNormalizedLatencyS })),
    ).toEqual(res.probes);
    for (const p of seen) expect(p.underBound).toBe(p.meanNormalizedLatencyS <= 0.03);
  });
});
