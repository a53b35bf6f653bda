import { createGpu, type Gpu } from '@kvasir/gpu';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ModelError } from '../../errors.js';
import { type LoadModelOptions, loadModel } from '../../model/model.js';
import {
  type DevicePlacement,
  gpuLayersPlacement,
  openWebGpuAdapter,
} from '../../model/placement.js';
import { releaseTestGpu, tempCheckpoint, testGpu, tinyConfig } from '../../testing/model.js';
import {
  expectSameRun,
  runShardScenario,
  SCENARIO_BLOCK_SIZE,
  SCENARIO_BLOCKS,
  type ShardScenarioRun,
} from '../../testing/shard-scenario.js';

// A model split by layer with WebGPU devices in it: two WebGPU devices (they share no buffers,
// so the hidden states cross through host memory as between two GPUs), WebGPU + wasm as
// llama.cpp's -ngl, and three shards. Tied embeddings and QKV bias: the last device holds the
// embedding table as its head.
describe('a model split by layer over WebGPU devices', () => {
  const config = tinyConfig({
    numLayers: 4,
    architecture: 'qwen2',
    attentionBias: true,
    tieWordEmbeddings: true,
  });
  let ckpt: Awaited<ReturnType<typeof tempCheckpoint>>;
  let second: Gpu;
  let unsplit: ShardScenarioRun;
  const run = async (opts: Partial<LoadModelOptions>): Promise<ShardScenarioRun> => {
    const model = await loadModel(ckpt.dir, {
      numBlocks: SCENARIO_BLOCKS,
      blockSize: SCENARIO_BLOCK_SIZE,
      kvFormat: 'f16',
      ...opts,
    });
    try {
      return await runShardScenario(model);
    } finally {
      await model.destroy();
    }
  };
  beforeAll(async () => {
    ckpt = await tempCheckpoint(config, 5);
    second = await createGpu({ label: 'kvasir-model-test.second' });
    unsplit = await run({ backend: 'webgpu', gpu: await testGpu() });
  });
  afterAll(async () => {
    second?.destroy();
    await releaseTestGpu();
    await ckpt?.cleanup();
  });

  it('on two WebGPU devices gives the one-device logits, KV bytes and swaps bit for bit', async () => {
    const gpu = await testGpu();
    const devices: DevicePlacement[] = [
      { backend: 'webgpu', gpu, layers: { firstLayer: 0, numLayers: 1 } },
      { backend: 'webgpu', gpu: second },
    ];
    expectSameRun(await run({ devices }), unsplit, 0);
  });

  it('WebGPU + wasm (--gpu-layers) and three shards agree within the backends tolerance', async () => {
    const gpu = await testGpu();
    const ngl = gpuLayersPlacement(2, config.numLayers).map((d) =>
      d.backend === 'webgpu' ? { ...d, gpu } : { ...d, threads: 2 },
    );
    expectSameRun(await run({ devices: ngl }), unsplit, 1e-4);
    const three: DevicePlacement[] = [
      { backend: 'wasm', threads: 2, layers: { firstLayer: 0, numLayers: 1 } },
      { backend: 'webgpu', gpu, layers: { firstLayer: 1, numLayers: 2 } },
      { backend: 'webgpu', gpu: second },
    ];
    expectSameRun(await run({ devices: three }), unsplit, 1e-4);
  });

  it('refuses an adapter index past the adapters there are, naming how many', async () => {
    const e = await openWebGpuAdapter(9).catch((x: unknown) => x);
    expect(ModelError.isInstance(e) && e.code).toBe('INVALID_ARGUMENT');
    expect((e as Error).message).toMatch(/^webgpu:9: this machine has \d WebGPU adapters?/);
  });
});
