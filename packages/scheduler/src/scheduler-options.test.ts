import { KvCacheManager } from '@kvasir/kv-allocator';
import { describe, it } from 'vitest';
import { Scheduler } from './scheduler.js';
import { expectError } from './testing/scheduler-harness.js';

describe('scheduler options', () => {
  it('refuses bad configuration', () => {
    const kv = new KvCacheManager({ numBlocks: 8, blockSize: 4 });
    expectError(() => new Scheduler({ kvCache: kv, maxModelLen: 0 }), 'INVALID_CONFIG');
    expectError(
      () => new Scheduler({ kvCache: kv, maxModelLen: 64, maxNumSeqs: 0 }),
      'INVALID_CONFIG',
    );
    expectError(
      () =>
        new Scheduler({
          kvCache: kv,
          maxModelLen: 64,
          maxNumBatchedTokens: 32,
          enableChunkedPrefill: false,
        }),
      'INVALID_CONFIG',
      /chunked/,
    );
    expectError(
      () =>
        new Scheduler({
          kvCache: kv,
          maxModelLen: 64,
          preemptionMode: 'drop' as 'swap',
        }),
      'INVALID_CONFIG',
    );
  });
});
