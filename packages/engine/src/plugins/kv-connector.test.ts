import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { defineKvConnector, type KvConnectorStep } from '@kvasir/offload/connectors';
import { describe, expect, it } from 'vitest';
import { KvasirEngineError } from '../errors.js';
import { guardKvConnector, loadKvConnectors } from './kv-connector.js';
import { PluginGuard } from './plugin-guard.js';

const spin = (ms: number) => {
  const t = performance.now();
  while (performance.now() - t < ms) {}
};

const step: KvConnectorStep = { rows: [], swapOut: [], swapIn: [] };
const request = { requestId: 'r', promptTokens: [1, 2, 3] };

describe('guardKvConnector', () => {
  it('passes calls through within the budget, getters included', async () => {
    let pending = true;
    const guarded = guardKvConnector(
      defineKvConnector({
        name: 'ok',
        onAdmit: async () => 2,
        get hasPendingWork() {
          return pending;
        },
        betweenSteps: async () => {
          pending = false;
        },
        beforeForward: async () => new Set(['lost']),
        close: async () => {},
      }),
      new PluginGuard('KV connector ok', 1000),
    );
    expect(await guarded.onAdmit?.(request)).toBe(2);
    expect(guarded.hasPendingWork).toBe(true);
    await guarded.betweenSteps?.();
    expect(guarded.hasPendingWork).toBe(false);
    expect(await guarded.beforeForward?.(step)).toEqual(new Set(['lost']));
    expect(guarded.afterForward).toBeUndefined();
  });

  it('a hook that blocks the thread past the budget fails once, then the connector is off', async () => {
    let calls = 0;
    const guard = new PluginGuard('KV connector slow', 20);
    const guarded = guardKvConnector(
      defineKvConnector({
        name: 'slow',
        onAdmit: async () => {
          calls++;
          return 3;
        },
        get hasPendingWork() {
          return true;
        },
        betweenSteps: async () => {
          calls++;
        },
        afterForward: () => {
          calls++;
          spin(40);
        },
        close: async () => {},
      }),
      guard,
    );
    let error: unknown;
    try {
      guarded.afterForward?.(step);
    } catch (e) {
      error = e;
    }
    expect(KvasirEngineError.isInstance(error) && error.code).toBe('PLUGIN_FAILED');
    expect(guard.disabled).toMatch(/afterForward took \d+ ms/);
    // Off: it brings nothing, has no work, and none of its code runs again.
    expect(await guarded.onAdmit?.(request)).toBe(0);
    expect(guarded.hasPendingWork).toBe(false);
    await guarded.betweenSteps?.();
    guarded.afterForward?.(step);
    expect(calls).toBe(1);
  });
});

describe('loadKvConnectors', () => {
  it('makes one guarded connector per module, a factory called with the engine context', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'kvasir-connector-unit-'));
    const path = join(dir, 'seen.mjs');
    await writeFile(
      path,
      `export default (context) => ({
  specificationVersion: 'v1',
  name: 'seen-' + context.extraKeys.modelId,
  close: async () => {},
});
`,
    );
    const [make, ...rest] = await loadKvConnectors([path], undefined, { budgetMs: 50 });
    expect(rest).toHaveLength(0);
    const connector = make!({ extraKeys: { modelId: 'm' } } as never);
    expect(connector.name).toBe('seen-m');
    expect(connector.specificationVersion).toBe('v1');
  });

  it('a factory that returns no connector fails when called, naming the module', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'kvasir-connector-unit-'));
    const path = join(dir, 'empty.mjs');
    await writeFile(path, 'export default () => ({ name: "x" });\n');
    const [make] = await loadKvConnectors([path]);
    expect(() => make!({} as never)).toThrow(
      expect.objectContaining({
        code: 'POLICY_LOAD',
        message: expect.stringMatching(
          /KV connector module .*empty\.mjs does not export a valid KV connector: .*specificationVersion/,
        ),
      }),
    );
  });
});
