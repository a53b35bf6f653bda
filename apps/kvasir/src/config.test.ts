import { describe, expect, it } from 'vitest';
import { parseEngineConfig } from './config.js';
import { KvasirAppError } from './errors.js';

describe('engine configuration', () => {
  it('fills safe defaults: loopback, prefix caching, LRU, recompute', () => {
    const c = parseEngineConfig({});
    expect(c.host).toBe('127.0.0.1');
    expect(c.enablePrefixCaching).toBe(true);
    expect(c.evictionPolicy).toBe('lru');
    expect(c.preemptionMode).toBe('recompute');
    expect(c.offload.hostBytes).toBeGreaterThan(0);
  });

  it('rejects bad values naming the field', () => {
    const attempt = (input: unknown) => {
      try {
        parseEngineConfig(input);
      } catch (error) {
        expect(KvasirAppError.isInstance(error)).toBe(true);
        return (error as KvasirAppError).message;
      }
      throw new Error('expected a failure');
    };
    expect(attempt({ blockSize: 12 })).toContain('blockSize');
    expect(attempt({ gpuMemoryFraction: 1.5 })).toContain('gpuMemoryFraction');
    expect(attempt({ offload: { hostBytes: -1 } })).toContain('offload.hostBytes');
    expect(attempt({ preemptionMode: 'teleport' })).toContain('preemptionMode');
  });
});
