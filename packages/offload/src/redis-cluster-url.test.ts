import { describe, expect, it } from 'vitest';
import { OffloadError } from './errors.js';
import { checkRedisUrl, parseRedisClusterUrl } from './redis-store.js';

describe('redis+cluster:// URLs', () => {
  it('parses seed nodes, default port, credentials and TLS', () => {
    expect(parseRedisClusterUrl('redis+cluster://127.0.0.1:7000,127.0.0.1:7001')).toEqual({
      nodes: [
        { host: '127.0.0.1', port: 7000 },
        { host: '127.0.0.1', port: 7001 },
      ],
      tls: false,
    });
    expect(parseRedisClusterUrl('rediss+cluster://app:s%40cret@cache,[::1]:7002/')).toEqual({
      nodes: [
        { host: 'cache', port: 6379 },
        { host: '::1', port: 7002 },
      ],
      username: 'app',
      password: 's@cret',
      tls: true,
    });
    expect(parseRedisClusterUrl('redis+cluster://:pw@h:1').password).toBe('pw');
  });

  it('refuses malformed clusters with INVALID_OPTIONS naming the fault', () => {
    const fault = (url: string): string => {
      try {
        checkRedisUrl(url);
      } catch (e) {
        expect(e).toBeInstanceOf(OffloadError);
        expect((e as OffloadError).code).toBe('INVALID_OPTIONS');
        return (e as Error).message;
      }
      throw new Error(`${url} was accepted`);
    };
    expect(fault('redis+cluster://')).toContain('malformed node ""');
    expect(fault('redis+cluster://a:1,,b:2')).toContain('malformed node ""');
    expect(fault('redis+cluster://a:0')).toContain('port out of range');
    expect(fault('redis+cluster://a:1/3')).toContain('is not redis+cluster://host:port');
    expect(fault('redis+cluster://a:x')).toContain('malformed node "a:x"');
    expect(() => checkRedisUrl('redis+cluster://a:7000,b:7001')).not.toThrow();
  });
});
