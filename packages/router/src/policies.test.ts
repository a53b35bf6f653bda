import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { RouterError } from './errors.js';
import {
  builtinRoutingPolicy,
  cacheAwarePolicy,
  kvAwarePolicy,
  leastLoadedPolicy,
  roundRobinPolicy,
} from './policies.js';
import {
  defineRoutingPolicy,
  type ReplicaCandidate,
  type RoutingRequest,
  validateRoutingPolicy,
} from './routing-policy.js';

const request: RoutingRequest = {
  kind: 'chat',
  model: 'm',
  promptBlocks: 10,
  promptTokens: 170,
  maxTokens: 16,
};

function candidate(index: number, fields: Partial<ReplicaCandidate> = {}): ReplicaCandidate {
  return {
    url: `http://r${index}`,
    index,
    inFlight: 0,
    pendingPrefillBlocks: 0,
    activeBlocks: 0,
    cachedBlocks: 0,
    cachedWeighted: 0,
    ...fields,
  };
}

const urlOf = (c: ReplicaCandidate | string) => (typeof c === 'string' ? c : c.url);

describe('kvAwarePolicy', () => {
  it('sends a request to the replica caching its prefix', () => {
    const p = kvAwarePolicy();
    const cs = [candidate(0), candidate(1, { cachedBlocks: 8, cachedWeighted: 8 }), candidate(2)];
    expect(urlOf(p.choose(request, cs))).toBe('http://r1');
    expect(p.explain?.(request, cs[1]!)).toContain('8/10 prompt blocks cached');
  });

  it('weighs a lower tier as a partial hit: 10 host blocks lose to 9 device blocks', () => {
    const p = kvAwarePolicy();
    const host = candidate(0, { cachedBlocks: 10, cachedWeighted: 8 });
    const gpu = candidate(1, { cachedBlocks: 9, cachedWeighted: 9 });
    expect(urlOf(p.choose(request, [host, gpu]))).toBe('http://r1');
  });

  it('moves off a hot replica once its load costs more than the prefill it saves', () => {
    const p = kvAwarePolicy({ overlapWeight: 1 });
    // cost(hot) = 1 x (0 + 0) + active; cost(cold) = 1 x (10 + 0) + 0 = 10.
    const hot = (active: number) =>
      candidate(0, { cachedBlocks: 10, cachedWeighted: 10, activeBlocks: active, inFlight: 1 });
    expect(urlOf(p.choose(request, [hot(9), candidate(1)]))).toBe('http://r0');
    expect(urlOf(p.choose(request, [hot(11), candidate(1)]))).toBe('http://r1');
    // A higher overlap weight keeps it on the cache longer.
    expect(
      urlOf(kvAwarePolicy({ overlapWeight: 2 }).choose(request, [hot(19), candidate(1)])),
    ).toBe('http://r0');
  });

  it('spreads ties in turn instead of piling them on the first', () => {
    const p = kvAwarePolicy();
    const cs = [candidate(0), candidate(1), candidate(2)];
    const chosen = Array.from({ length: 6 }, () => urlOf(p.choose(request, cs)));
    expect(new Set(chosen).size).toBe(3);
  });
});

describe('cacheAwarePolicy', () => {
  it('keeps a prompt on its cache while the replicas are in balance, where kv-aware moves it', () => {
    // r1 holds 8 of 10 blocks and is busier; r0 is idle.
    const cs = [
      candidate(0),
      candidate(1, { cachedBlocks: 8, cachedWeighted: 8, inFlight: 3, activeBlocks: 30 }),
    ];
    expect(urlOf(cacheAwarePolicy().choose(request, cs))).toBe('http://r1');
    expect(urlOf(kvAwarePolicy().choose(request, cs))).toBe('http://r0');
    expect(builtinRoutingPolicy('cache-aware').name).toBe('cache-aware');
  });

  it('sends a new prompt to the fewest in flight, then where the index holds the fewest blocks', () => {
    const p = cacheAwarePolicy();
    // 2 of 10 blocks (a shared opening) is under the 0.3 threshold: a new prompt.
    const cs = [
      candidate(0, { cachedBlocks: 2, cachedWeighted: 2, indexedBlocks: 64, inFlight: 1 }),
      candidate(1, { indexedBlocks: 10, inFlight: 2 }),
      candidate(2, { indexedBlocks: 40, inFlight: 1 }),
    ];
    expect(urlOf(p.choose(request, cs))).toBe('http://r2');
    // At 3 of 10 the cache decides.
    const warm = [candidate(0, { cachedBlocks: 3, cachedWeighted: 3, indexedBlocks: 64 }), cs[2]!];
    expect(urlOf(p.choose(request, warm))).toBe('http://r0');
  });

  it('weighs a lower tier as a partial hit: 10 host blocks lose to 9 device blocks', () => {
    const host = candidate(0, { cachedBlocks: 10, cachedWeighted: 8 });
    const gpu = candidate(1, { cachedBlocks: 9, cachedWeighted: 9 });
    expect(urlOf(cacheAwarePolicy().choose(request, [host, gpu]))).toBe('http://r1');
  });

  it('goes to the idlest replica once the busiest is more than abs and rel times ahead', () => {
    const p = cacheAwarePolicy({ balanceAbsThreshold: 4, balanceRelThreshold: 1.5 });
    const hot = (inFlight: number) =>
      candidate(0, { cachedBlocks: 10, cachedWeighted: 10, inFlight });
    expect(urlOf(p.choose(request, [hot(6), candidate(1, { inFlight: 2 })]))).toBe('http://r0');
    expect(urlOf(p.choose(request, [hot(7), candidate(1, { inFlight: 2 })]))).toBe('http://r1');
    // 4 ahead but not 1.5 times: still the cache.
    expect(urlOf(p.choose(request, [hot(20), candidate(1, { inFlight: 15 })]))).toBe('http://r0');
  });

  it('always picks a candidate: the idlest when out of balance, the most cached when the cache decides, else the idlest with the most room', () => {
    const arbCandidates = fc
      .array(
        fc.record({
          inFlight: fc.nat(12),
          cachedWeighted: fc.integer({ min: 0, max: 10 }),
          indexedBlocks: fc.nat(100),
        }),
        { minLength: 1, maxLength: 5 },
      )
      .map((rs) => rs.map((r, i) => candidate(i, { ...r, cachedBlocks: r.cachedWeighted })));
    fc.assert(
      fc.property(arbCandidates, fc.nat(10), fc.integer({ min: 1, max: 4 }), (cs, abs, rel) => {
        const p = cacheAwarePolicy({ balanceAbsThreshold: abs, balanceRelThreshold: rel });
        const chosen = p.choose(request, cs);
        expect(cs).toContain(chosen);
        const c = chosen as ReplicaCandidate;
        const loads = cs.map((x) => x.inFlight);
        const max = Math.max(...loads);
        const min = Math.min(...loads);
        const top = Math.max(...cs.map((x) => x.cachedWeighted));
        if (max - min > abs && max > rel * min) expect(c.inFlight).toBe(min);
        else if (top / request.promptBlocks >= 0.3) expect(c.cachedWeighted).toBe(top);
        else {
          expect(c.inFlight).toBe(min);
          const idle = cs.filter((x) => x.inFlight === min);
          expect(c.indexedBlocks).toBe(Math.min(...idle.map((x) => x.indexedBlocks ?? 0)));
        }
      }),
      { numRuns: 300 },
    );
  });
});

describe('roundRobinPolicy and leastLoadedPolicy', () => {
  it('round-robin takes each replica in turn and skips the ones not offered', () => {
    const p = roundRobinPolicy();
    const cs = [candidate(0), candidate(1), candidate(2)];
    expect([0, 1, 2, 3].map(() => urlOf(p.choose(request, cs)))).toEqual([
      'http://r0',
      'http://r1',
      'http://r2',
      'http://r0',
    ]);
    expect(urlOf(p.choose(request, [cs[0]!, cs[2]!]))).toBe('http://r2');
  });

  it('least-loaded takes the fewest in flight, ignoring caches', () => {
    const p = leastLoadedPolicy();
    const cs = [
      candidate(0, { inFlight: 2, cachedBlocks: 10, cachedWeighted: 10 }),
      candidate(1, { inFlight: 1 }),
    ];
    expect(urlOf(p.choose(request, cs))).toBe('http://r1');
  });
});

describe('validateRoutingPolicy', () => {
  it.each([
    [null, 'must be an object'],
    [{ name: 'x', choose: (): string => 'a' }, 'no specificationVersion'],
    [{ specificationVersion: 'v2', name: 'x', choose: (): string => 'a' }, "'v1'"],
    [{ specificationVersion: 'v1', name: '', choose: (): string => 'a' }, 'non-empty name'],
    [{ specificationVersion: 'v1', name: 'x' }, 'missing the function "choose"'],
    [
      { specificationVersion: 'v1', name: 'x', choose: (): string => 'a', explain: 3 },
      'explain must be a function',
    ],
  ])('refuses %j naming what is wrong', (value, message) => {
    expect(() => validateRoutingPolicy(value)).toThrow(message);
    try {
      validateRoutingPolicy(value);
    } catch (error) {
      expect(RouterError.isInstance(error) && error.code).toBe('INVALID_POLICY');
    }
  });

  it('defineRoutingPolicy stamps the version', () => {
    const p = defineRoutingPolicy({ name: 'first', choose: (_r, cs) => cs[0]! });
    expect(p.specificationVersion).toBe('v1');
    expect(validateRoutingPolicy(p)).toBe(p);
  });
});
