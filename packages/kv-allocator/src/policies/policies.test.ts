import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { defineEvictionPolicy, validateEvictionPolicy } from './eviction-policy.js';
import { FifoPolicy } from './fifo-policy.js';
import { LfuPolicy } from './lfu-policy.js';
import { LruPolicy } from './lru-policy.js';
import { createEvictionPolicy, evictionPolicies } from './registry.js';

describe('LruPolicy', () => {
  it('evicts the least recently inserted or touched key', () => {
    const p = new LruPolicy<number>();
    p.insert(1);
    p.insert(2);
    p.insert(3);
    expect(p.chooseVictim()).toBe(1);
    p.touch(1);
    expect(p.chooseVictim()).toBe(2);
    p.remove(2);
    expect(p.chooseVictim()).toBe(3);
    p.remove(3);
    p.remove(1);
    expect(p.chooseVictim()).toBeUndefined();
  });
});

describe('FifoPolicy', () => {
  it('ignores hits: first in, first out', () => {
    const p = new FifoPolicy<string>();
    p.insert('a');
    p.insert('b');
    p.touch('a');
    expect(p.chooseVictim()).toBe('a');
  });
});

describe('LfuPolicy', () => {
  it('evicts the least used key, least recent among equals', () => {
    const p = new LfuPolicy<number>();
    p.insert(1);
    p.insert(2);
    p.insert(3);
    p.touch(1);
    p.touch(1);
    p.touch(2);
    expect(p.chooseVictim()).toBe(3);
    p.remove(3);
    expect(p.chooseVictim()).toBe(2);
    expect(p.countOf(1)).toBe(3);
  });

  it('keeps a count across reuse, and drops it on forget', () => {
    const p = new LfuPolicy<number>();
    p.insert(7);
    p.touch(7);
    p.touch(7);
    p.remove(7); // reused by a sequence
    p.insert(8);
    p.insert(7); // freed again: still the hotter one
    expect(p.chooseVictim()).toBe(8);
    p.forget(7);
    expect(p.countOf(7)).toBe(0);
  });

  it('bounds the remembered history', () => {
    const p = new LfuPolicy<number>({ historyCapacity: 2 });
    for (const k of [1, 2, 3]) {
      p.insert(k);
      p.remove(k);
    }
    expect(p.countOf(1)).toBe(0);
    expect(p.countOf(3)).toBe(1);
  });
});

type Op = { kind: 'insert' | 'touch' | 'remove'; key: number };

const ops = fc.array(
  fc.record({
    kind: fc.constantFrom<'insert' | 'touch' | 'remove'>('insert', 'touch', 'remove'),
    key: fc.integer({ min: 0, max: 9 }),
  }),
  { maxLength: 200 },
);

/** Naive models of each policy, written as plainly as possible, to compare against. */
function naive(name: 'lru' | 'fifo' | 'lfu') {
  let clock = 0;
  const evictable = new Map<number, { since: number; recent: number; count: number }>();
  const history = new Map<number, number>();
  return {
    apply(op: Op) {
      clock++;
      const e = evictable.get(op.key);
      if (op.kind === 'insert' && !e) {
        evictable.set(op.key, { since: clock, recent: clock, count: history.get(op.key) ?? 1 });
        history.delete(op.key);
      } else if (op.kind === 'insert' && e && name === 'lru') {
        e.recent = clock;
      } else if (op.kind === 'touch' && e) {
        e.recent = clock;
        e.count++;
      } else if (op.kind === 'touch' && !e) {
        history.set(op.key, (history.get(op.key) ?? 1) + 1);
      } else if (op.kind === 'remove' && e) {
        history.set(op.key, e.count);
        evictable.delete(op.key);
      }
    },
    victim(): number | undefined {
      let best: number | undefined;
      let bestScore: [number, number] = [Number.POSITIVE_INFINITY, Number.POSITIVE_INFINITY];
      for (const [key, e] of evictable) {
        const score: [number, number] =
          name === 'fifo' ? [e.since, 0] : name === 'lru' ? [e.recent, 0] : [e.count, e.recent];
        if (score[0] < bestScore[0] || (score[0] === bestScore[0] && score[1] < bestScore[1])) {
          best = key;
          bestScore = score;
        }
      }
      return best;
    },
  };
}

describe('built-in policies against naive models', () => {
  for (const name of ['lru', 'fifo', 'lfu'] as const) {
    it(`${name} picks the same victim as a naive scan after every operation`, () => {
      fc.assert(
        fc.property(ops, (sequence) => {
          const policy = createEvictionPolicy<number>(name);
          const model = naive(name);
          for (const op of sequence) {
            policy[op.kind](op.key);
            model.apply(op);
            expect(policy.chooseVictim()).toBe(model.victim());
          }
        }),
        { numRuns: 300 },
      );
    });
  }
});

describe('validateEvictionPolicy', () => {
  it('accepts a policy made by defineEvictionPolicy, stamped v1', () => {
    const policy = defineEvictionPolicy<number>({
      name: 'none',
      insert() {},
      touch() {},
      remove() {},
      chooseVictim: () => undefined,
    });
    expect(policy.specificationVersion).toBe('v1');
    expect(validateEvictionPolicy(policy)).toBe(policy);
  });

  it('refuses an unversioned or future-versioned object, naming the fix', () => {
    const hooks = {
      name: 'x',
      insert() {},
      touch() {},
      remove() {},
      chooseVictim: () => undefined,
    };
    expect(() => validateEvictionPolicy(hooks)).toThrow(/defineEvictionPolicy/);
    expect(() => validateEvictionPolicy({ ...hooks, specificationVersion: 'v2' })).toThrow(
      /"v2" is not supported/,
    );
  });

  it('names the missing hook', () => {
    expect(() =>
      defineEvictionPolicy({ name: 'y', insert() {}, touch() {}, remove() {} } as never),
    ).toThrow(/chooseVictim/);
    expect(() => validateEvictionPolicy(42)).toThrow(/object/);
    expect(() => createEvictionPolicy('arc' as never)).toThrow(/unknown eviction policy/);
  });

  it('every built-in in the registry is a valid v1 policy under its own name', () => {
    for (const [name, make] of Object.entries(evictionPolicies)) {
      const policy = validateEvictionPolicy(make());
      expect(policy.name).toBe(name);
      expect(createEvictionPolicy(name as never).name).toBe(name);
    }
  });
});
