import { describe, expect, it } from 'vitest';
import { expectError } from '../testing/scheduler-harness.js';
import { kvCompressionFromJson, parseKvCompression } from './parse.js';

describe('parseKvCompression / kvCompressionFromJson', () => {
  it('reads the CLI form and the JSON form into the same policy', () => {
    const a = parseKvCompression('sinks:sinks=4,window=1020');
    const b = kvCompressionFromJson({ policy: 'sinks', sinks: 4, window: 1020 });
    expect(a.positions).toBe('cache');
    expect(b.positions).toBe('cache');
    expect([a.policy.name, a.policy.maxBlocks(16)]).toEqual(['sinks', 65]);
    expect(b.policy.maxBlocks(16)).toBe(65);
    expect(parseKvCompression(' h2o : budget=256 , recent=0.25 ').policy.maxBlocks(16)).toBe(16);
    expect(parseKvCompression('snapkv:budget=64,observation=8').policy.observationWindow).toBe(8);
    expect(parseKvCompression('window:window=512,positions=original').positions).toBe('original');
    expect(
      kvCompressionFromJson({ policy: 'h2o', budget: 64, positions: 'original' }),
    ).toMatchObject({ positions: 'original', policy: { name: 'h2o', attention: 'decode' } });
  });

  it('names the unknown policy, the unknown or repeated key, and the bad value', () => {
    expectError(
      () => parseKvCompression('lru:window=4'),
      'INVALID_ARGUMENT',
      /unknown policy "lru"/,
    );
    expectError(() => parseKvCompression('window:size=4'), 'INVALID_ARGUMENT', /parameter "size"/);
    expectError(
      () => parseKvCompression('window:window=x'),
      'INVALID_ARGUMENT',
      /window must be a number/,
    );
    expectError(() => parseKvCompression('window:window=4.5'), 'INVALID_ARGUMENT', /integer/);
    expectError(() => parseKvCompression('window:window=4,window=5'), 'INVALID_ARGUMENT', /twice/);
    expectError(() => parseKvCompression('window:window'), 'INVALID_ARGUMENT', /key=value/);
    expectError(() => parseKvCompression('sinks:sinks=4'), 'INVALID_ARGUMENT', /window must be/);
    expectError(
      () => parseKvCompression('window:window=8,positions=rope'),
      'INVALID_ARGUMENT',
      /positions/,
    );
    expectError(() => parseKvCompression(''), 'INVALID_ARGUMENT');
    expectError(
      () => kvCompressionFromJson({ policy: 'h2o', budget: 64, recnt: 1 }),
      'INVALID_ARGUMENT',
      /"recnt"/,
    );
    expectError(() => kvCompressionFromJson({ budget: 64 }), 'INVALID_ARGUMENT', /policy must be/);
    expectError(() => kvCompressionFromJson('sinks'), 'INVALID_ARGUMENT', /expected an object/);
    expectError(
      () => kvCompressionFromJson({ policy: 'toString' }),
      'INVALID_ARGUMENT',
      /unknown policy/,
    );
  });

  it('refuses a budget under two blocks once the block size is known', () => {
    expect(parseKvCompression('h2o:budget=16').policy.maxBlocks(16)).toBe(1);
    expectError(
      () => parseKvCompression('h2o:budget=16', { blockSize: 16 }),
      'INVALID_ARGUMENT',
      /at least 2 blocks/,
    );
    expect(parseKvCompression('h2o:budget=17', { blockSize: 16 }).policy.maxBlocks(16)).toBe(2);
    expectError(
      () => kvCompressionFromJson({ policy: 'window', window: 8 }, { blockSize: 8 }),
      'INVALID_ARGUMENT',
      /window holds 1 block/,
    );
  });
});
