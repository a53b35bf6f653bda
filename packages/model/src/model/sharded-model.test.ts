import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { KvFormatName } from '../execution/kv-cache.js';
import { tempCheckpoint, tinyConfig } from '../testing/model.js';
import {
  expectSameRun,
  runShardScenario,
  SCENARIO_BLOCK_SIZE,
  SCENARIO_BLOCKS,
  type ShardScenarioRun,
} from '../testing/shard-scenario.js';
import { type LoadModelOptions, loadModel } from './model.js';
import { type DevicePlacement, parseDevices } from './placement.js';

// Four layers, so that splits of 1+3, 2+2 and 1+1+2 exist; MHA and GQA.
const CONFIGS = {
  gqa: tinyConfig({ numLayers: 4 }),
  mha: tinyConfig({ numLayers: 4, numKvHeads: 2 }),
};

describe.each(Object.entries(CONFIGS))('a model split by layer (%s)', (_name, config) => {
  let ckpt: Awaited<ReturnType<typeof tempCheckpoint>>;
  beforeAll(async () => {
    ckpt = await tempCheckpoint(config, 7);
  });
  afterAll(async () => {
    await ckpt?.cleanup();
  });

  const run = async (opts: Partial<LoadModelOptions>): Promise<ShardScenarioRun> => {
    const model = await loadModel(ckpt.dir, {
      numBlocks: SCENARIO_BLOCKS,
      blockSize: SCENARIO_BLOCK_SIZE,
      kvFormat: 'f32',
      ...opts,
    });
    try {
      return await runShardScenario(model);
    } finally {
      await model.destroy();
    }
  };
  const placed = (text: string, threads = 2): DevicePlacement[] =>
    parseDevices(text).map((d) => (d.backend === 'wasm' ? { ...d, threads } : d));

  it.each([
    ['cpu', 'cpu,cpu'],
    ['cpu', 'cpu:layers=0-0,cpu'],
    ['cpu', 'cpu,cpu,cpu'],
    ['wasm', 'wasm,wasm'],
    ['wasm', 'wasm:layers=0-2,wasm'],
    ['wasm', 'wasm,wasm,wasm'],
  ] as const)(
    'on %s, split as %s, gives the unsplit model logits, KV bytes and swapped blocks bit for bit',
    async (backend, devices) => {
      const want = await run({ backend, threads: 2 });
      const got = await run({ devices: placed(devices) });
      expectSameRun(got, want, 0);
    },
  );

  it('cpu + wasm gives the cpu model logits within the wasm backend tolerance', async () => {
    const want = await run({ backend: 'cpu' });
    for (const devices of ['cpu,wasm', 'wasm:layers=0-2,cpu', 'wasm,cpu,wasm']) {
      expectSameRun(await run({ devices: placed(devices) }), want, 1e-4);
    }
  });

  it.each([
    'f16',
    'int8',
    'int8-h8',
    'fp8-e4m3',
    'fp8-e5m2',
    'int4-g32',
    'int4-g32-h32',
  ] as KvFormatName[])('keeps KV format %s bit for bit on wasm + wasm', async (kvFormat) => {
    const want = await run({ backend: 'wasm', threads: 2, kvFormat });
    const got = await run({ devices: placed('wasm,wasm'), kvFormat });
    expectSameRun(got, want, 0);
  });

  it('reports its devices and layers', async () => {
    const model = await loadModel(ckpt.dir, {
      numBlocks: 4,
      blockSize: SCENARIO_BLOCK_SIZE,
      kvFormat: 'f32',
      devices: placed('cpu:layers=0-0,wasm'),
    });
    try {
      expect(model.backend).toBe('cpu');
      expect(model.devices).toEqual([
        { backend: 'cpu', firstLayer: 0, numLayers: 1 },
        { backend: 'wasm', firstLayer: 1, numLayers: 3 },
      ]);
      // Every layer of a block, whichever device holds it: K and V rows of f32.
      expect(model.kvBlockBytes).toBe(
        config.numLayers * 2 * config.numKvHeads * SCENARIO_BLOCK_SIZE * config.headDim * 4,
      );
    } finally {
      await model.destroy();
    }
  });
});
