import {
  type DeviceMemoryInput,
  KvasirEngineError,
  planMemory,
  WEBGPU_DEFAULT_MEMORY_BYTES,
} from '@kvasir/engine';
import { kvBytesPerBlock } from '@kvasir/kv-allocator';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { splitDeviceInputs } from './bootstrap.js';
import type { PlacedDevice } from './load-model-runner.js';

// A model split by layer: each device's memory holds its weights and its layers' part of every
// block, so the device with the least room bounds the block count, and one that cannot hold its
// weights is refused by name.
const layout = { numLayers: 8, numKvHeads: 2, headDim: 32, blockSize: 16, bytesPerElement: 4 };
const perBlock = kvBytesPerBlock(layout);
const perLayerBlock = perBlock / layout.numLayers;
const MiB = 2 ** 20;

function device(i: number, layers: number, over: Partial<DeviceMemoryInput> = {}) {
  return {
    name: `device ${i} (wasm, layers ?)`,
    numLayers: layers,
    weightBytes: 10 * MiB,
    memoryBytes: 64 * MiB,
    memorySource: 'wasm-memory' as const,
    fraction: 1,
    reservedBytes: 4 * MiB,
    maxLayerKvBytes: 2 ** 30,
    ...over,
  };
}

const hostPlan = (devices: DeviceMemoryInput[], numBlocksOverride?: number) =>
  planMemory({
    deviceBytes: 2 ** 40,
    fraction: 0.9,
    weightBytes: 0,
    activationBytes: 0,
    layout,
    maxBindingBytes: Number.MAX_SAFE_INTEGER,
    devices,
    ...(numBlocksOverride === undefined ? {} : { numBlocksOverride }),
  });

describe('the memory plan of a model split by layer', () => {
  it('gives every device the blocks the device with the least room holds, and says which', () => {
    // Device 1 has the heavier weights: (64 - 40 - 4) MiB over its 4 layers' share of a block.
    const plan = hostPlan([device(0, 4), device(1, 4, { weightBytes: 40 * MiB })]);
    const want = Math.floor((20 * MiB) / (4 * perLayerBlock));
    expect(plan.numBlocks).toBe(want);
    expect(plan.limitedBy).toBe('device');
    expect(plan.limitingDevice).toBe(1);
    expect(plan.devices?.map((d) => d.maxBlocks)).toEqual([
      Math.floor((50 * MiB) / (4 * perLayerBlock)),
      want,
    ]);
    expect(plan.devices?.map((d) => d.kvCacheBytes)).toEqual([
      want * 4 * perLayerBlock,
      want * 4 * perLayerBlock,
    ]);
  });

  it('keeps each device within its own budget, for any split and sizes', () => {
    fc.assert(
      fc.property(
        fc.array(
          fc.record({
            layers: fc.integer({ min: 1, max: 4 }),
            memory: fc.integer({ min: 1, max: 256 * MiB }),
            weights: fc.integer({ min: 0, max: 128 * MiB }),
            reserved: fc.integer({ min: 0, max: 8 * MiB }),
            fraction: fc.constantFrom(1, 0.9, 0.5),
            binding: fc.integer({ min: perLayerBlock, max: 2 ** 30 }),
          }),
          { minLength: 2, maxLength: 4 },
        ),
        fc.option(fc.integer({ min: 1, max: 4000 }), { nil: undefined }),
        (specs, override) => {
          const devices = specs.map((s, i) =>
            device(i, s.layers, {
              memoryBytes: s.memory,
              weightBytes: s.weights,
              reservedBytes: s.reserved,
              fraction: s.fraction,
              maxLayerKvBytes: s.binding,
            }),
          );
          let plan: ReturnType<typeof planMemory>;
          try {
            plan = hostPlan(devices, override);
          } catch (error) {
            // Refused only naming a device that cannot hold its share, or a forced count.
            expect(KvasirEngineError.isInstance(error)).toBe(true);
            expect((error as KvasirEngineError).code).toBe('INVALID_CONFIG');
            const i = (error as KvasirEngineError).details?.device as number;
            expect((error as Error).message).toContain(`device ${i} (`);
            const s = specs[i] as (typeof specs)[number];
            const budget = Math.floor(s.memory * s.fraction);
            const room = Math.min(
              Math.floor((budget - s.weights - s.reserved) / (s.layers * perLayerBlock)),
              Math.floor(s.binding / perLayerBlock),
            );
            expect(room).toBeLessThan(override ?? 1);
            return;
          }
          for (const [i, s] of specs.entries()) {
            const kv = plan.numBlocks * s.layers * perLayerBlock;
            expect(s.weights + s.reserved + kv, `device ${i}`).toBeLessThanOrEqual(
              Math.floor(s.memory * s.fraction),
            );
            expect(kv / s.layers).toBeLessThanOrEqual(s.binding);
            expect(plan.devices?.[i]?.kvCacheBytes).toBe(kv);
          }
          if (override !== undefined) expect(plan.numBlocks).toBe(override);
          else {
            // As many as the tightest device holds: one more would not fit it.
            expect(plan.numBlocks).toBe(Math.min(...(plan.devices ?? []).map((d) => d.maxBlocks)));
          }
        },
      ),
    );
  });

  it('refuses a device whose weights leave no room, naming it and its numbers', () => {
    const err = (() => {
      try {
        hostPlan([device(0, 4), device(1, 4, { weightBytes: 61 * MiB })]);
      } catch (error) {
        return error as KvasirEngineError;
      }
      throw new Error('planned');
    })();
    expect(err.code).toBe('INVALID_CONFIG');
    expect(err.message).toBe(
      'device 1 (wasm, layers ?): its weights (61.0 MiB) and activations (4.0 MiB) leave no room for its part of one KV block (32.0 KiB) in its budget of 64.0 MiB (its WebAssembly memory): give it fewer layers',
    );
  });

  it('refuses a forced block count one device cannot hold, naming it', () => {
    expect(() => hostPlan([device(0, 4), device(1, 4, { weightBytes: 59 * MiB })], 100)).toThrow(
      /^--num-gpu-blocks: 100 blocks do not fit device 1 \(wasm, layers \?\), whose budget of 64\.0 MiB \(its WebAssembly memory\) holds its weights \(59\.0 MiB\), activations and 32 blocks$/,
    );
  });
});

describe('the memory of each device of a split', () => {
  const placed = (over: Partial<PlacedDevice>): PlacedDevice => ({
    description: 'x',
    firstLayer: 0,
    numLayers: 2,
    weightBytes: MiB,
    hostMemory: true,
    memoryBytes: null,
    reservedBytes: 0,
    maxLayerKvBytes: 2 ** 30,
    ...over,
  });
  const host = () => 8 * 2 ** 30;

  it('is a WebAssembly memory for wasm, whole, with its activation reserve', () => {
    const [d] = splitDeviceInputs(
      { devices: [placed({ memoryBytes: 2 ** 32, reservedBytes: 256 * MiB })] },
      { gpuMemoryBytes: undefined, gpuMemoryFraction: 0.9 },
      5 * MiB,
      host,
    );
    expect(d).toMatchObject({
      memoryBytes: 2 ** 32,
      memorySource: 'wasm-memory',
      fraction: 1,
      reservedBytes: 256 * MiB,
    });
  });

  it('is --gpu-memory-bytes for each WebGPU device, not one budget shared by all', () => {
    const gpus = [
      placed({ hostMemory: false }),
      placed({ hostMemory: false, firstLayer: 2, description: 'y' }),
    ];
    const configured = splitDeviceInputs(
      { devices: gpus },
      { gpuMemoryBytes: 300 * MiB, gpuMemoryFraction: 0.8 },
      5 * MiB,
      host,
    );
    expect(
      configured.map((d) => [d.memoryBytes, d.memorySource, d.fraction, d.reservedBytes]),
    ).toEqual([
      [300 * MiB, 'configured', 0.8, 5 * MiB],
      [300 * MiB, 'configured', 0.8, 5 * MiB],
    ]);
    expect(configured[1]?.name).toBe('device 1 (y, layers 2-3)');
    const unset = splitDeviceInputs(
      { devices: gpus },
      { gpuMemoryBytes: undefined, gpuMemoryFraction: 0.9 },
      0,
      host,
    );
    expect(unset.map((d) => d.memoryBytes)).toEqual([
      WEBGPU_DEFAULT_MEMORY_BYTES,
      WEBGPU_DEFAULT_MEMORY_BYTES,
    ]);
  });

  it('is host memory for a cpu device', () => {
    const [d] = splitDeviceInputs(
      { devices: [placed({})] },
      { gpuMemoryBytes: 300 * MiB, gpuMemoryFraction: 0.9 },
      5 * MiB,
      host,
    );
    expect([d?.memoryBytes, d?.memorySource]).toEqual([8 * 2 ** 30, 'host-available']);
  });
});
