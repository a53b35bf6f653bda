import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ModelError } from '../errors.js';
import { bitmaskAllows, bitmaskWords } from '../grammar/output-constraint.js';
import {
  applyLogitBias,
  applyPenalties,
  logprobs,
  Sampler,
  SamplingState,
  sample,
} from './sampler.js';

function softmax(x: ArrayLike<number>, t = 1): number[] {
  const arr = Array.from(x, (v) => v / t);
  const m = Math.max(...arr);
  const e = arr.map((v) => Math.exp(v - m));
  const s = e.reduce((a, b) => a + b, 0);
  return e.map((v) => v / s);
}

/** Tokens ordered by probability, most likely first (ties: lower id first). */
function order(x: ArrayLike<number>): number[] {
  return Array.from(x, (_, i) => i).sort((a, b) => x[b]! - x[a]! || a - b);
}

const logitsArb = fc
  .array(fc.float({ min: -8, max: 8, noNaN: true, noDefaultInfinity: true }), {
    minLength: 2,
    maxLength: 300,
  })
  .map((a) => Float32Array.from(a));

describe('Sampler', () => {
  it('greedy (temperature 0) returns the argmax', () => {
    fc.assert(
      fc.property(logitsArb, (logits) => {
        const r = sample(logits, { temperature: 0 }, new SamplingState(1));
        const best = Math.max(...logits);
        expect(r.token).toBe(logits.indexOf(best));
      }),
    );
  });

  it('top-k only ever draws one of the k most likely tokens', () => {
    fc.assert(
      fc.property(logitsArb, fc.integer({ min: 1, max: 10 }), fc.integer(), (logits, k, seed) => {
        const allowed = new Set(order(logits).slice(0, k));
        const st = new SamplingState(seed);
        for (let i = 0; i < 5; i++)
          expect(allowed.has(sample(logits, { topK: k, seed }, st).token)).toBe(true);
      }),
    );
  });

  it('top-p only draws from the nucleus (with temperature applied first)', () => {
    fc.assert(
      fc.property(
        logitsArb,
        fc.double({ min: 0.05, max: 0.99, noNaN: true }),
        fc.double({ min: 0.3, max: 2, noNaN: true }),
        fc.integer(),
        (logits, p, t, seed) => {
          const probs = softmax(logits, t);
          const ord = order(probs);
          const nucleus = new Set<number>();
          let cum = 0;
          for (const id of ord) {
            nucleus.add(id);
            cum += probs[id]!;
            if (cum >= p - 1e-9) break;
          }
          // Tokens tied with the nucleus' last member may swap with it; accept them too.
          const lastP = probs[[...nucleus].at(-1)!]!;
          const st = new SamplingState(seed);
          for (let i = 0; i < 5; i++) {
            const tok = sample(logits, { topP: p, temperature: t }, st).token;
            expect(nucleus.has(tok) || Math.abs(probs[tok]! - lastP) < 1e-6).toBe(true);
          }
        },
      ),
    );
  });

  it('min-p drops tokens below min_p × the best probability', () => {
    fc.assert(
      fc.property(
        logitsArb,
        fc.double({ min: 0.01, max: 1, noNaN: true }),
        fc.integer(),
        (logits, mp, seed) => {
          const probs = softmax(logits);
          const pmax = Math.max(...probs);
          const st = new SamplingState(seed);
          for (let i = 0; i < 5; i++) {
            const tok = sample(logits, { minP: mp }, st).token;
            expect(probs[tok]!).toBeGreaterThanOrEqual(mp * pmax * (1 - 1e-5));
          }
        },
      ),
    );
  });

  it('combines top-k, top-p and min-p as the intersection of their supports', () => {
    const logits = Float32Array.from([5, 4.9, 4.8, 1, 0.5, 0, -1, -2]);
    const seen = new Set<number>();
    const st = new SamplingState(3);
    for (let i = 0; i < 400; i++)
      seen.add(sample(logits, { topK: 5, topP: 0.9, minP: 0.05 }, st).token);
    expect([...seen].sort()).toEqual([0, 1, 2]);
  });

  it('never draws a token masked with -Infinity', () => {
    const logits = Float32Array.from([0, Number.NEGATIVE_INFINITY, 0, Number.NEGATIVE_INFINITY]);
    const st = new SamplingState(9);
    for (let i = 0; i < 200; i++)
      expect([0, 2]).toContain(sample(logits, { temperature: 1.3 }, st).token);
  });

  it('draws with the softmax frequencies', () => {
    const logits = Float32Array.from([1, 0, -1, 2]);
    const probs = softmax(logits, 0.8);
    const counts = [0, 0, 0, 0];
    const st = new SamplingState(1234);
    const n = 40000;
    for (let i = 0; i < n; i++) counts[sample(logits, { temperature: 0.8 }, st).token]!++;
    for (let i = 0; i < 4; i++) {
      const sd = Math.sqrt((probs[i]! * (1 - probs[i]!)) / n);
      expect(Math.abs(counts[i]! / n - probs[i]!)).toBeLessThan(5 * sd);
    }
    // The same holds through the sorted (top-p) path.
    const counts2 = [0, 0, 0, 0];
    const st2 = new SamplingState(99);
    for (let i = 0; i < n; i++)
      counts2[sample(logits, { temperature: 0.8, topP: 0.9999 }, st2).token]!++;
    for (let i = 0; i < 4; i++) {
      const sd = Math.sqrt((probs[i]! * (1 - probs[i]!)) / n);
      expect(Math.abs(counts2[i]! / n - probs[i]!)).toBeLessThan(5 * sd);
    }
  });

  it('is deterministic per seed and independent of other requests', () => {
    const rows = Array.from({ length: 30 }, (_, i) =>
      Float32Array.from({ length: 50 }, (_, j) => Math.sin(i * 7 + j * 3) * 3),
    );
    const run = (seed: number, interleave: boolean) => {
      const sampler = new Sampler();
      const a = new SamplingState(seed);
      const other = new SamplingState(seed + 1);
      const out: number[] = [];
      for (const r of rows) {
        if (interleave) sampler.sample(r, { temperature: 1.5 }, other);
        out.push(sampler.sample(r, { temperature: 0.9, topP: 0.95, topK: 40 }, a).token);
      }
      return out;
    };
    expect(run(5, false)).toEqual(run(5, true));
    expect(run(5, false)).toEqual(run(5, false));
    expect(run(5, false)).not.toEqual(run(6, false));
  });

  it('forked states share history but draw from their own seed', () => {
    const logits = Float32Array.from({ length: 64 }, (_, j) => Math.cos(j));
    const parent = new SamplingState(1, [3, 4]);
    sample(logits, {}, parent);
    const c1 = parent.fork(10);
    const c2 = parent.fork(10);
    expect(c1.outputCounts).toEqual(parent.outputCounts);
    const draws = (s: SamplingState) =>
      Array.from({ length: 10 }, () => sample(logits, {}, s).token);
    expect(draws(c1)).toEqual(draws(c2));
  });

  it('reports stop tokens and refuses bad parameters', () => {
    const logits = Float32Array.from([0, 5, 0]);
    expect(sample(logits, { temperature: 0, stopTokenIds: [1] }, new SamplingState(0)).stop).toBe(
      true,
    );
    expect(sample(logits, { temperature: 0, stopTokenIds: [2] }, new SamplingState(0)).stop).toBe(
      false,
    );
    for (const bad of [
      { temperature: -1 },
      { topP: 0 },
      { topP: 1.5 },
      { minP: 2 },
      { topK: 1.5 },
      { repetitionPenalty: 0 },
      { topLogprobs: -1 },
      { presencePenalty: Number.NaN },
      { seed: 0.5 },
    ]) {
      expect(() => sample(logits, bad, new SamplingState(0))).toThrow(ModelError);
    }
    expect(() => sample(new Float32Array(0), {}, new SamplingState(0))).toThrow(ModelError);
  });

  it('refuses a row with NaN, +Infinity or no finite logit, under every kind of sampling', () => {
    const kinds = [{ temperature: 0 }, { temperature: 0.7, topP: 0.9 }, { topK: 5 }, { minP: 0.1 }];
    const rows: [Float32Array, string][] = [
      [Float32Array.from([0.5, Number.NaN, 2, 1]), 'logit 1 of the row is NaN'],
      // A model whose weights were read shifted: every logit NaN. Greedy used to answer token 0.
      [new Float32Array(8).fill(Number.NaN), 'logit 0 of the row is NaN'],
      [Float32Array.from([0, 1, Number.POSITIVE_INFINITY]), 'logit 2 of the row is Infinity'],
      [new Float32Array(4).fill(Number.NEGATIVE_INFINITY), 'every logit of the row is -Infinity'],
    ];
    for (const [row, message] of rows) {
      for (const params of kinds) {
        const state = new SamplingState(1);
        let error: unknown;
        try {
          sample(row, params, state);
        } catch (e) {
          error = e;
        }
        expect(ModelError.isInstance(error), `${message} ${JSON.stringify(params)}`).toBe(true);
        expect((error as ModelError).code).toBe('INVALID_ARGUMENT');
        expect((error as Error).message).toContain(message);
        // Nothing was recorded for the failed draw.
        expect(state.generated).toBe(0);
      }
    }
  });

  it('refuses a row whose allowed tokens all have -Infinity logits, under greedy and random draws', () => {
    const row = Float32Array.from([Number.NEGATIVE_INFINITY, 0, 1]);
    const onlyFirst = Int32Array.of(1);
    for (const params of [{ temperature: 0 }, { temperature: 1 }, { topP: 0.5 }]) {
      const state = new SamplingState(3);
      expect(() => new Sampler().sample(row, params, state, onlyFirst)).toThrow(
        /no allowed token has a finite logit/,
      );
      expect(state.generated).toBe(0);
    }
  });

  it('draws from any row of finite logits, with -Infinity masks', () => {
    fc.assert(
      fc.property(logitsArb, fc.integer({ min: 0, max: 299 }), fc.nat(), (row, masked, seed) => {
        if (masked < row.length - 1) row[masked] = Number.NEGATIVE_INFINITY;
        const { token } = sample(row, { temperature: 1 }, new SamplingState(seed));
        expect(row[token]).toBeGreaterThan(Number.NEGATIVE_INFINITY);
      }),
    );
  });
});

describe('penalties', () => {
  it('change exactly the logits of tokens in the history, in the right direction', () => {
    fc.assert(
      fc.property(
        fc.array(fc.float({ min: -5, max: 5, noNaN: true }), { minLength: 10, maxLength: 40 }),
        fc.array(fc.nat({ max: 9 }), { maxLength: 5 }),
        fc.array(fc.nat({ max: 9 }), { maxLength: 8 }),
        (raw, prompt, output) => {
          const base = Float32Array.from(raw);
          const st = new SamplingState(0, prompt);
          for (const t of output) st.record(t);
          const rep = base.slice();
          applyPenalties(rep, { repetitionPenalty: 1.5 }, st);
          const pen = base.slice();
          applyPenalties(pen, { presencePenalty: 0.5, frequencyPenalty: 0.25 }, st);
          for (let t = 0; t < base.length; t++) {
            const inPrompt = prompt.includes(t);
            const count = output.filter((o) => o === t).length;
            if (inPrompt || count > 0) {
              // Repetition penalty always makes a seen token less likely (or keeps a zero logit).
              expect(rep[t]!).toBeLessThanOrEqual(base[t]!);
              if (Math.abs(base[t]!) > 1e-30) expect(rep[t]).not.toBe(base[t]);
            } else expect(rep[t]).toBe(base[t]);
            expect(pen[t]!).toBeCloseTo(base[t]! - (count > 0 ? 0.5 + 0.25 * count : 0), 5);
          }
        },
      ),
    );
  });

  it('steer greedy decoding away from repeated tokens', () => {
    const logits = Float32Array.from([2, 1.9, -3]);
    const st = new SamplingState(0, [0]);
    expect(sample(logits, { temperature: 0 }, new SamplingState(0, [0])).token).toBe(0);
    expect(sample(logits, { temperature: 0, repetitionPenalty: 1.2 }, st).token).toBe(1);
    const st2 = new SamplingState(0);
    st2.record(0);
    expect(sample(logits, { temperature: 0, frequencyPenalty: 0.2 }, st2).token).toBe(1);
  });
});

describe('logprobs', () => {
  it('are a log-softmax: probabilities sum to 1, top-n sorted and consistent', () => {
    fc.assert(
      fc.property(logitsArb, fc.integer({ min: 1, max: 20 }), (logits, n) => {
        const all = logprobs(logits, 0, logits.length);
        const total = all.top.reduce((a, t) => a + Math.exp(t.logprob), 0);
        expect(total).toBeCloseTo(1, 5);
        const { top, logprob } = logprobs(logits, 1, n);
        expect(top.length).toBe(Math.min(n, logits.length));
        for (let i = 1; i < top.length; i++)
          expect(top[i]!.logprob).toBeLessThanOrEqual(top[i - 1]!.logprob);
        expect(top.map((t) => t.token)).toEqual(order(logits).slice(0, top.length));
        expect(Math.exp(logprob)).toBeCloseTo(softmax(logits)[1]!, 5);
      }),
    );
  });

  it('come with every sample when asked', () => {
    const logits = Float32Array.from([0, 1, 2, 3]);
    const r = sample(logits, { temperature: 0, topLogprobs: 2 }, new SamplingState(0));
    expect(r.token).toBe(3);
    expect(r.topLogprobs.map((t) => t.token)).toEqual([3, 2]);
    expect(r.logprob!).toBeCloseTo(Math.log(softmax(logits)[3]!), 6);
    const plain = sample(logits, { temperature: 0 }, new SamplingState(0));
    expect(plain.logprob).toBeNull();
    expect(
      sample(logits, { temperature: 0, logprobs: true }, new SamplingState(0)).logprob!,
    ).toBeCloseTo(r.logprob!, 12);
  });
});

describe('token masks (grammar-constrained rows)', () => {
  /** A mask allowing `allowed` of `v` tokens. */
  function maskOf(v: number, allowed: readonly number[]): Int32Array {
    const mask = new Int32Array(bitmaskWords(v));
    for (const t of allowed) mask[t >>> 5] = mask[t >>> 5]! | (1 << (t & 31));
    return mask;
  }
  const paramsArb = fc.record({
    temperature: fc.constantFrom(0, 0.5, 1, 2),
    topK: fc.constantFrom(0, 1, 3, 50),
    topP: fc.constantFrom(1, 0.9, 0.3),
    minP: fc.constantFrom(0, 0.1),
    seed: fc.integer({ min: 0, max: 2 ** 31 }),
  });

  it('only ever draws an allowed token, whatever the parameters', () => {
    fc.assert(
      fc.property(
        logitsArb.chain((logits) =>
          fc.tuple(
            fc.constant(logits),
            fc.uniqueArray(fc.integer({ min: 0, max: logits.length - 1 }), {
              minLength: 1,
              maxLength: logits.length,
            }),
          ),
        ),
        paramsArb,
        ([logits, allowed], params) => {
          const mask = maskOf(logits.length, allowed);
          const sampler = new Sampler();
          const state = new SamplingState(params.seed);
          for (let i = 0; i < 5; i++) {
            const r = sampler.sample(logits, params, state, mask);
            expect(allowed).toContain(r.token);
            expect(bitmaskAllows(mask, r.token)).toBe(true);
          }
        },
      ),
    );
  });

  it('draws the allowed tokens with their renormalized softmax frequencies', () => {
    const logits = Float32Array.from([2, 1, 0.5, 3, -1, 0]);
    const allowed = [1, 2, 5];
    const mask = maskOf(logits.length, allowed);
    const p = softmax(allowed.map((t) => logits[t]!));
    const state = new SamplingState(9);
    const counts = new Map<number, number>();
    const n = 20_000;
    for (let i = 0; i < n; i++) {
      const t = sample(logits, {}, state, mask).token;
      counts.set(t, (counts.get(t) ?? 0) + 1);
    }
    allowed.forEach((t, i) => {
      expect((counts.get(t) ?? 0) / n).toBeCloseTo(p[i]!, 1);
    });
    // Log-probabilities stay those of the model's distribution, as unconstrained.
    const r = sample(logits, { logprobs: true }, state, mask);
    expect(r.logprob).toBeCloseTo(logprobs(logits, r.token, 0).logprob, 6);
  });

  it('leaves an all-ones mask and no mask alike, and refuses a short or empty mask', () => {
    const logits = Float32Array.from({ length: 70 }, (_, i) => Math.sin(i));
    const all = new Int32Array(bitmaskWords(70)).fill(-1);
    const a = new SamplingState(4);
    const b = new SamplingState(4);
    for (let i = 0; i < 20; i++) {
      expect(sample(logits, {}, a, all).token).toBe(sample(logits, {}, b).token);
    }
    expect(() => sample(logits, {}, a, new Int32Array(2))).toThrow(/words/);
    expect(() => sample(logits, {}, a, new Int32Array(3))).toThrow(/allows no token/);
    // Bits past the row's end do not count as allowed.
    expect(() => sample(logits, {}, a, maskOf(96, [80]))).toThrow(/allows no token/);
  });
});

describe('logit bias', () => {
  it('adds to the logits before sampling: +100 forces, -100 bans', () => {
    const logits = Float32Array.from([3, 1, 0, 2]);
    expect(
      sample(logits, { temperature: 0, logitBias: new Map([[2, 100]]) }, new SamplingState(1))
        .token,
    ).toBe(2);
    const state = new SamplingState(2);
    for (let i = 0; i < 200; i++) {
      expect(sample(logits, { logitBias: new Map([[0, -100]]) }, state).token).not.toBe(0);
    }
    // Ids past the row are ignored.
    expect(sample(logits, { temperature: 0, logitBias: new Map([[9, 100]]) }, state).token).toBe(0);
    const buf = Float32Array.from([1, 1]);
    applyLogitBias(buf, new Map([[1, -0.5]]));
    expect([...buf]).toEqual([1, 0.5]);
  });

  it('refuses non-finite biases and bad token ids', () => {
    const logits = Float32Array.from([1, 2]);
    const s = new SamplingState(1);
    expect(() => sample(logits, { logitBias: new Map([[0, Number.NaN]]) }, s)).toThrow(ModelError);
    expect(() => sample(logits, { logitBias: new Map([[-1, 1]]) }, s)).toThrow(/logitBias/);
    expect(() => sample(logits, { logitBias: new Map([[0.5, 1]]) }, s)).toThrow(/logitBias/);
  });
});
