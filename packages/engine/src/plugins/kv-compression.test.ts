import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ModelConfig, ModelDevice } from '@kvasir/model';
import { EngineError, type KvCompressionRequest } from '@kvasir/server/spec';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KvasirEngineError } from '../errors.js';
import { kvCompressionLimitsOf } from '../model-adapter.js';
import {
  checkDefaultCompression,
  compressionLimitFor,
  engineKvCompression,
  loadKvCompression,
} from './kv-compression.js';

let dir: string;

// A user's scoring policy as a user writes it: a plain object of the v1 contract (no import
// needed), keeping the first block and the two most recent ones.
const POLICY = `export default {
  specificationVersion: 'v1',
  name: 'first-and-last',
  attention: 'none',
  maxBlocks: () => 3,
  select(v) {
    const drop = [];
    for (let i = 1; i < v.numBlocks - 2; i++) drop.push(i);
    return drop;
  },
};
`;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kvasir-kvc-module-'));
  await writeFile(join(dir, 'policy.mjs'), POLICY);
  await writeFile(join(dir, 'broken.mjs'), 'export default { name: "x" };\n');
});

afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('--kv-compression and kv_compression', () => {
  it('a built-in default applies to requests without their own, which may pick another', async () => {
    const setup = await loadKvCompression('sinks:sinks=4,window=28', 8);
    expect(setup.describe).toBe('sinks:sinks=4,window=28');
    const fallback = setup.forRequest(undefined)!;
    expect(fallback.policy.name).toBe('sinks');
    expect(fallback.policy.maxBlocks(8)).toBe(1 + 4);
    const own = setup.forRequest({ policy: 'h2o', budget: 64, positions: 'original' })!;
    expect(own.policy.name).toBe('h2o');
    expect(own.positions).toBe('original');
  });

  it('without a default, requests still choose built-ins and get nothing otherwise', async () => {
    const setup = await loadKvCompression(undefined, 16);
    expect(setup.defaultSpec).toBeUndefined();
    expect(setup.forRequest(undefined)).toBeUndefined();
    expect(setup.forRequest({ policy: 'window', window: 64 })!.policy.maxBlocks(16)).toBe(4);
  });

  it('loads a policy module as the default; requests name it and may set only positions', async () => {
    const setup = await loadKvCompression(join(dir, 'policy.mjs'), 8);
    expect(setup.defaultSpec!.policy.name).toBe('first-and-last');
    expect(setup.defaultSpec!.positions).toBe('cache');
    const view = {
      blockSize: 8,
      numBlocks: 6,
      numTokens: 44,
      totalTokens: 44,
      promptTokens: 8,
      prefillDone: true,
      blockScores: new Float32Array(6),
      blockStarts: Int32Array.from([0, 8, 16, 24, 32, 40]),
    };
    expect(setup.defaultSpec!.policy.select(view)).toEqual([1, 2, 3]);
    const named = setup.forRequest({ policy: 'first-and-last', positions: 'original' })!;
    expect(named.positions).toBe('original');
    expect(() => setup.forRequest({ policy: 'first-and-last', window: 3 })).toThrow(
      /takes no parameters, got window/,
    );
    // Built-ins stay available beside it.
    expect(setup.forRequest({ policy: 'window', window: 32 })!.policy.name).toBe('window');
    const withPositions = await loadKvCompression(
      `${join(dir, 'policy.mjs')}:positions=original`,
      8,
    );
    expect(withPositions.defaultSpec!.positions).toBe('original');
  });

  it('refuses what it cannot use, naming the flag or the field', async () => {
    const bad = async (setting: string) => {
      try {
        await loadKvCompression(setting, 16);
      } catch (error) {
        expect(KvasirEngineError.isInstance(error)).toBe(true);
        return error as KvasirEngineError;
      }
      throw new Error(`expected ${setting} to be refused`);
    };
    expect((await bad('sinks:sinks=4')).message).toMatch(/--kv-compression: .*window/);
    expect((await bad('nope:window=3')).code).toBe('INVALID_CONFIG');
    expect((await bad('h2o:budget=16')).message).toMatch(/2 blocks/);
    expect((await bad(join(dir, 'missing.mjs'))).code).toBe('POLICY_LOAD');
    const broken = await bad(join(dir, 'broken.mjs'));
    expect(broken.code).toBe('POLICY_LOAD');
    expect(broken.message).toMatch(/does not export a valid KV compression policy/);
    expect((await bad(`${join(dir, 'policy.mjs')}:window=3`)).message).toMatch(/positions=/);
    const setup = await loadKvCompression(undefined, 16);
    for (const request of [
      { policy: 'lru' },
      { policy: 'sinks', sinks: 4, window: 'x' },
    ] as KvCompressionRequest[]) {
      try {
        setup.forRequest(request);
        throw new Error('expected a refusal');
      } catch (error) {
        expect(error).toBeInstanceOf(EngineError);
        expect((error as EngineError).code).toBe('INVALID_REQUEST');
        expect((error as EngineError).details).toMatchObject({ param: 'kv_compression' });
      }
    }
  });

  it('refuses at start-up a default whose cache positions would reach the context', async () => {
    const big = await loadKvCompression('window:window=1024', 16);
    expect(() => checkDefaultCompression(big, 16, 1024)).toThrow(
      /--kv-compression: window holds up to 1024 tokens .* context of 1024/,
    );
    expect(() => checkDefaultCompression(big, 16, 2048)).not.toThrow();
    const original = await loadKvCompression('window:window=1024,positions=original', 16);
    expect(() => checkDefaultCompression(original, 16, 1024)).not.toThrow();
    const none = await loadKvCompression(undefined, 16);
    expect(() => checkDefaultCompression(none, 16, 8)).not.toThrow();
  });
});

describe("KV compression a model's sliding-window layers cannot run", () => {
  const config = (slidingWindowLayers?: number[]) =>
    ({ architecture: 'gemma3', numLayers: 6, slidingWindowLayers }) as unknown as ModelConfig;
  const on = (...devices: [ModelDevice['backend'], number, number][]) =>
    devices.map(([backend, firstLayer, numLayers]) => ({ backend, firstLayer, numLayers }));
  const kvLayout = { blockSize: 16 } as never;

  it('is none without sliding layers; original positions with them; mass where webgpu holds one', async () => {
    expect(kvCompressionLimitsOf({ config: config(), devices: on(['webgpu', 0, 6]) })).toBe(
      undefined,
    );
    const wasm = kvCompressionLimitsOf({ config: config([0, 1]), devices: on(['wasm', 0, 6]) });
    expect(wasm?.originalPositions).toMatch(/gemma3's sliding-window layers/);
    expect(wasm?.attentionMass).toBe(undefined);
    // Layers 0-1 slide; a webgpu device holding only the global layers reads no window.
    const globalOnGpu = on(['wasm', 0, 2], ['webgpu', 2, 4]);
    expect(
      kvCompressionLimitsOf({ config: config([0, 1]), devices: globalOnGpu })?.attentionMass,
    ).toBe(undefined);
    const slidingOnGpu = on(['wasm', 0, 1], ['webgpu', 1, 5]);
    const gpu = kvCompressionLimitsOf({ config: config([0, 1]), devices: slidingOnGpu });
    expect(gpu?.attentionMass).toMatch(/on webgpu/);

    const spec = async (s: string) => (await loadKvCompression(s, 16)).defaultSpec;
    const sinks = await spec('sinks:sinks=4,window=28');
    const original = await spec('window:window=32,positions=original');
    const h2o = await spec('h2o:budget=64');
    expect(compressionLimitFor(sinks, gpu)).toBe(undefined);
    expect(compressionLimitFor(original, wasm)).toBe(wasm?.originalPositions);
    expect(compressionLimitFor(h2o, wasm)).toBe(undefined);
    expect(compressionLimitFor(h2o, gpu)).toMatch(/^h2o: policies that read attention mass/);
    expect(compressionLimitFor(original, undefined)).toBe(undefined);
  });

  it('a default the model cannot run stops the engine at start-up with INVALID_CONFIG', async () => {
    const limits = kvCompressionLimitsOf({ config: config([0]), devices: on(['webgpu', 0, 6]) });
    const setup = await loadKvCompression('h2o:budget=64', 16);
    expect(() => engineKvCompression(setup, { kvLayout, kvCompressionLimits: limits })).toThrow(
      expect.objectContaining({
        code: 'INVALID_CONFIG',
        message: expect.stringMatching(/^--kv-compression: h2o: /),
      }),
    );
    expect(() => engineKvCompression(setup, { kvLayout })).not.toThrow();
    const none = engineKvCompression(undefined, { kvLayout, kvCompressionLimits: limits });
    expect(none.defaultSpec).toBe(undefined);
  });
});
