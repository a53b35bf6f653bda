import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { closestMatch, parseEngineConfig, readConfigFile } from './config.js';
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

describe('configuration errors name the fix', () => {
  const failure = (input: unknown, name?: (path: string) => string): string => {
    try {
      parseEngineConfig(input, name);
    } catch (error) {
      expect(KvasirAppError.isInstance(error)).toBe(true);
      expect((error as KvasirAppError).code).toBe('INVALID_CONFIG');
      return (error as KvasirAppError).message;
    }
    throw new Error('expected a failure');
  };

  it('refuses unknown keys, at any depth, with the closest valid key', () => {
    expect(failure({ prot: 9000 })).toContain('unknown key prot (did you mean "port"?)');
    expect(failure({ maxNumSeq: 4 })).toContain('did you mean "maxNumSeqs"?');
    expect(failure({ offload: { hostbytes: 1 } })).toContain('did you mean "offload.hostBytes"?');
    // Nothing close: no guess, but the list of valid keys.
    expect(failure({ zzzzzzzz: 1 })).not.toContain('did you mean');
    expect(failure({ zzzzzzzz: 1 })).toContain('the valid keys are model,');
  });

  it('names the allowed values of a closed set, and what was given', () => {
    expect(failure({ blockSize: 7 })).toContain('expected one of 1, 2, 4, 8, 16, 32, got 7');
    expect(failure({ kvDtype: 'f8' })).toMatch(/expected one of "f32", "f16", .*got "f8"/);
  });

  it('refuses a Redis URL that is not redis:// or rediss://', () => {
    expect(failure({ offload: { redisUrl: 'http://foo' } })).toContain('offload.redisUrl');
    expect(() =>
      parseEngineConfig({ offload: { redisUrl: 'rediss://cache:6380/1' } }),
    ).not.toThrow();
  });

  it('takes a Redis Cluster as redis+cluster://host:port,... and names a malformed node', () => {
    expect(() =>
      parseEngineConfig({ offload: { redisUrl: 'redis+cluster://10.0.0.1:7000,10.0.0.2:7001' } }),
    ).not.toThrow();
    expect(failure({ offload: { redisUrl: 'redis+cluster://a:7000,b:99999' } })).toContain(
      'port out of range in "b:99999"',
    );
  });

  it('names a setting the way the caller says (a flag, a file)', () => {
    expect(failure({ blockSize: 7 }, (p) => (p === 'blockSize' ? '--block-size' : p))).toContain(
      'at --block-size:',
    );
  });

  it('closestMatch suggests only near misses', () => {
    expect(closestMatch('prot', ['host', 'port'])).toBe('port');
    expect(closestMatch('evictionpolicy', ['evictionPolicy'])).toBe('evictionPolicy');
    expect(closestMatch('banana', ['port', 'host'])).toBeUndefined();
  });
});

describe('readConfigFile', () => {
  const readError = async (text: string): Promise<string> => {
    const dir = await mkdtemp(join(tmpdir(), 'kvasir-config-'));
    const file = join(dir, 'kvasir.json');
    await writeFile(file, text);
    return readConfigFile(file).then(
      () => 'no error',
      (e: unknown) => (e as Error).message,
    );
  };

  it('gives the line and column of a JSON syntax error', async () => {
    expect(await readError('{\n  "port": 1,\n  "host" "x"\n}')).toMatch(/line 3, column 10/);
    expect(await readError('{"port": tru}')).toMatch(/Unexpected token '}' at line 1, column 13/);
    expect(await readError('{"port": 1,')).toMatch(/line 1, column 12/);
    expect(await readError('')).toMatch(/Unexpected end of the file at line 1, column 1/);
  });

  it('refuses JSON that is not an object', async () => {
    expect(await readError('[1, 2]')).toContain('must hold a JSON object');
  });
});
