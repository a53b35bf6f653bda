import { describe, expect, it } from 'vitest';
import { KvasirEngineError } from '../errors.js';
import { PluginGuard } from './plugin-guard.js';

const spin = (ms: number) => {
  const t = performance.now();
  while (performance.now() - t < ms) {}
};

describe('PluginGuard', () => {
  it('passes results and throws through while calls stay within the budget', () => {
    const guard = new PluginGuard('eviction policy p', 1000);
    expect(guard.call('chooseVictim', () => 7)).toBe(7);
    expect(() =>
      guard.call('insert', () => {
        throw new Error('bug');
      }),
    ).toThrow('bug');
    expect(guard.disabled).toBeUndefined();
  });

  it('disables the plug-in after one call over the budget; later calls never run it', () => {
    const guard = new PluginGuard('KV compression policy slow', 20);
    let runs = 0;
    const slow = () => {
      runs++;
      spin(40);
      return [1];
    };
    expect(() => guard.call('select', slow)).toThrow(
      /KV compression policy slow select took \d+ ms, over the 20 ms budget of a plug-in call; disabled/,
    );
    let error: unknown;
    try {
      guard.call('select', slow);
    } catch (e) {
      error = e;
    }
    expect(KvasirEngineError.isInstance(error) && error.code).toBe('PLUGIN_FAILED');
    expect((error as Error).message).toMatch(/is disabled: select took/);
    expect(runs).toBe(1);
  });

  it('a call that throws after overrunning the budget also disables it', () => {
    const guard = new PluginGuard('p', 10);
    expect(() =>
      guard.call('touch', () => {
        spin(30);
        throw new Error('late');
      }),
    ).toThrow('late');
    expect(guard.disabled).toMatch(/touch took/);
  });
});
