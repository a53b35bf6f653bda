import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ModelError } from '../errors.js';
import { shardHoldsTensor } from '../execution/weights.js';
import type { CheckpointReader } from '../formats/checkpoint-reader.js';
import { openCheckpoint } from '../formats/open-checkpoint.js';
import { tempCheckpoint, tinyConfig } from '../testing/model.js';
import { gpuLayersPlacement, parseDevices, resolvePlacement, wasmPlacement } from './placement.js';

function refused(f: () => unknown, ...parts: string[]): void {
  refusedAs('INVALID_ARGUMENT', f, ...parts);
}

function refusedAs(code: string, f: () => unknown, ...parts: string[]): void {
  let thrown: unknown;
  try {
    f();
  } catch (e) {
    thrown = e;
  }
  expect(ModelError.isInstance(thrown), `threw ${String(thrown)}`).toBe(true);
  expect((thrown as ModelError).code).toBe(code);
  for (const p of parts) expect((thrown as Error).message).toContain(p);
}

describe('parseDevices', () => {
  it('reads backends, adapter indices and inclusive layer ranges in order', () => {
    expect(parseDevices('wasm,wasm')).toEqual([{ backend: 'wasm' }, { backend: 'wasm' }]);
    expect(parseDevices('webgpu:0:layers=0-19, wasm')).toEqual([
      { backend: 'webgpu', adapter: 0, layers: { firstLayer: 0, numLayers: 20 } },
      { backend: 'wasm' },
    ]);
    expect(parseDevices('webgpu:0,webgpu:1')).toEqual([
      { backend: 'webgpu', adapter: 0 },
      { backend: 'webgpu', adapter: 1 },
    ]);
    expect(parseDevices('cpu:layers=3-3')).toEqual([
      { backend: 'cpu', layers: { firstLayer: 3, numLayers: 1 } },
    ]);
  });

  it('refuses what does not parse, naming the device', () => {
    refused(() => parseDevices(''), 'not a device list');
    refused(() => parseDevices('wasm,,wasm'), 'not a device list');
    refused(() => parseDevices('wasm,tpu'), "device 1 'tpu'", "unknown backend 'tpu'");
    refused(() => parseDevices('wasm:0'), "device 0 'wasm:0'", "'0'");
    refused(() => parseDevices('cpu:layers=5-2'), 'layers 5-2', 'empty range');
    refused(() => parseDevices('cpu:layers=0-1:layers=2-3'), 'names its layers twice');
  });
});

describe('resolvePlacement', () => {
  it('splits the unnamed layers evenly between the devices without a range, in order', () => {
    expect(resolvePlacement(parseDevices('wasm,wasm'), 5)).toEqual([
      { firstLayer: 0, numLayers: 3 },
      { firstLayer: 3, numLayers: 2 },
    ]);
    expect(resolvePlacement(parseDevices('webgpu:layers=0-19,wasm'), 32)).toEqual([
      { firstLayer: 0, numLayers: 20 },
      { firstLayer: 20, numLayers: 12 },
    ]);
    expect(resolvePlacement(parseDevices('cpu,wasm:layers=2-2,cpu'), 6)).toEqual([
      { firstLayer: 0, numLayers: 2 },
      { firstLayer: 2, numLayers: 1 },
      { firstLayer: 3, numLayers: 3 },
    ]);
  });

  it('refuses bad placements with the devices and numbers', () => {
    refused(
      () => resolvePlacement(parseDevices('wasm:layers=0-19,wasm:layers=10-31'), 32),
      'device 1 (wasm) layers 10-31 overlap device 0 (wasm) layers 0-19',
    );
    refused(
      () => resolvePlacement(parseDevices('wasm:layers=0-40'), 32),
      'layers 0-40',
      '32 layers (0-31)',
    );
    refused(
      () => resolvePlacement(parseDevices('wasm:layers=0-9,cpu:layers=20-31'), 32),
      'layers 10-19 are on no device',
    );
    refused(
      () => resolvePlacement(parseDevices('wasm:layers=0-29,cpu,cpu,cpu'), 32),
      'device 3 (cpu) gets no layer',
      '2 layers (30-31) for 3 devices',
    );
    refused(
      () => resolvePlacement(parseDevices('cpu:layers=10-31,wasm:layers=0-9'), 32),
      'list devices in layer order',
    );
    refused(() => resolvePlacement([], 4), 'at least one device');
  });

  it('covers every layer once, in list order, for any list it accepts', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 40 }),
        fc.array(fc.option(fc.tuple(fc.nat(45), fc.integer({ min: 1, max: 12 }))), {
          minLength: 1,
          maxLength: 5,
        }),
        (layers, ranges) => {
          const devices = ranges.map((r) => ({
            backend: 'cpu' as const,
            ...(r === null ? {} : { layers: { firstLayer: r[0], numLayers: r[1] } }),
          }));
          let slices: ReturnType<typeof resolvePlacement>;
          try {
            slices = resolvePlacement(devices, layers);
          } catch (e) {
            expect(ModelError.isInstance(e)).toBe(true);
            return;
          }
          let next = 0;
          for (const [i, s] of slices.entries()) {
            expect(s.firstLayer).toBe(next);
            expect(s.numLayers).toBeGreaterThan(0);
            const named = devices[i]?.layers;
            if (named) expect(s).toEqual(named);
            next += s.numLayers;
          }
          expect(next).toBe(layers);
        },
      ),
      { numRuns: 500 },
    );
  });
});

describe('gpuLayersPlacement', () => {
  it('puts the first N layers on WebGPU and the rest on wasm, leaving out an empty side', () => {
    expect(gpuLayersPlacement(20, 32)).toEqual([
      { backend: 'webgpu', layers: { firstLayer: 0, numLayers: 20 } },
      { backend: 'wasm', layers: { firstLayer: 20, numLayers: 12 } },
    ]);
    expect(gpuLayersPlacement(0, 4)).toEqual([
      { backend: 'wasm', layers: { firstLayer: 0, numLayers: 4 } },
    ]);
    expect(gpuLayersPlacement(4, 4)).toEqual([
      { backend: 'webgpu', layers: { firstLayer: 0, numLayers: 4 } },
    ]);
    refused(() => gpuLayersPlacement(33, 32), 'gpu layers', '[0, 32]', '33');
    refused(() => gpuLayersPlacement(-1, 32), 'gpu layers');
  });
});

describe('wasmPlacement', () => {
  let ckpt: Awaited<ReturnType<typeof tempCheckpoint>>;
  let reader: CheckpointReader;
  beforeAll(async () => {
    ckpt = await tempCheckpoint(tinyConfig({ numLayers: 6 }), 3);
    reader = await openCheckpoint(ckpt.dir);
  });
  afterAll(async () => {
    await reader?.close();
    await ckpt?.cleanup();
  });
  const bytesOf = (first: number, count: number, kv: number) =>
    [...reader.tensors]
      .filter(([n]) => shardHoldsTensor(reader.config, { firstLayer: first, numLayers: count }, n))
      .reduce((a, [, t]) => a + t.byteLength, 0) +
    count * kv;

  it('keeps a model that fits one memory on one device', () => {
    expect(wasmPlacement(reader, { kvBytesPerLayer: 1024, threads: 2 })).toEqual([
      { backend: 'wasm', layers: { firstLayer: 0, numLayers: 6 }, threads: 2 },
    ]);
  });

  it('packs consecutive layers into as few memories as hold them, each within its memory', () => {
    const kv = 4096;
    const memory = bytesOf(0, 2, kv) + 100;
    const devices = wasmPlacement(reader, { kvBytesPerLayer: kv, memoryBytes: memory });
    expect(devices.length).toBeGreaterThan(1);
    const slices = resolvePlacement(devices, 6);
    for (const s of slices) {
      expect(bytesOf(s.firstLayer, s.numLayers, kv)).toBeLessThanOrEqual(memory);
      // Greedy: one more layer would not have fit.
      if (s.firstLayer + s.numLayers < 6) {
        expect(bytesOf(s.firstLayer, s.numLayers + 1, kv)).toBeGreaterThan(memory);
      }
    }
  });

  it('refuses a layer that alone does not fit a memory, naming it and the sizes', () => {
    refusedAs(
      'INVALID_CONFIG',
      () => wasmPlacement(reader, { kvBytesPerLayer: 4096, memoryBytes: 1000 }),
      'layer 0',
      'does not fit one WebAssembly memory of 1000 bytes',
    );
  });
});
