import { basename, resolve } from 'node:path';
import {
  DiskStore,
  HostMemoryStore,
  type KvBlockStore,
  kvNamespace,
  RedisStore,
  TieredStore,
} from '@kvasir/offload';
import { defaultCacheDir, type EngineConfig } from './config.js';
import { DEFAULT_MODEL_NAME, ensureDefaultModel } from './default-model.js';
import { KvasirEngine } from './engine.js';
import { loadEvictionPolicy } from './eviction.js';
import { type MemoryPlan, planMemory } from './memory-plan.js';
import { type LoadedModel, loadModelRunner } from './model-runner.js';

/** An engine with everything it was built from, for banners, `info` and shutdown. */
export interface BuiltEngine {
  readonly engine: KvasirEngine;
  readonly model: LoadedModel;
  readonly plan: MemoryPlan;
  readonly modelPath: string;
  /** True when serving the embedded random-weight default. */
  readonly isDefaultModel: boolean;
  /** Names of the offload tiers in order (`host`, `disk`, `redis`). */
  readonly offloadTiers: readonly string[];
  /** Stops the loop, closes offload stores and releases the device. */
  close(): Promise<void>;
}

/** Resolves the model path, creating the embedded default model when none is configured. */
export async function resolveModelPath(
  config: EngineConfig,
): Promise<{ path: string; isDefault: boolean }> {
  if (config.model) return { path: resolve(config.model), isDefault: false };
  const dir = await ensureDefaultModel(
    config.cacheDir ?? defaultCacheDir(),
    config.defaultModelSeed,
  );
  return { path: dir, isDefault: true };
}

/** Loads the model and plans memory without starting an engine (`kvasir info`). */
export async function loadAndPlan(config: EngineConfig): Promise<{
  model: LoadedModel;
  plan: MemoryPlan;
  path: string;
  isDefault: boolean;
}> {
  const { path, isDefault } = await resolveModelPath(config);
  const model = await loadModelRunner(path, config);
  const plan = planMemory({
    deviceBytes: config.gpuMemoryBytes,
    fraction: config.gpuMemoryFraction,
    weightBytes: model.weightBytes,
    activationBytes: model.activationBytes(config.maxNumBatchedTokens, config.maxNumSeqs),
    layout: model.kvLayout,
    maxBindingBytes: model.maxBindingBytes,
    ...(config.numGpuBlocks === undefined ? {} : { numBlocksOverride: config.numGpuBlocks }),
  });
  return { model, plan, path, isDefault };
}

async function buildOffload(
  config: EngineConfig,
  model: LoadedModel,
): Promise<{ store: TieredStore; tiers: KvBlockStore[] } | undefined> {
  const o = config.offload;
  if (o.hostBytes === 0 && !o.diskDir && !o.redisUrl) return undefined;
  const layout = model.kvLayout;
  const namespace = kvNamespace({
    modelId: model.modelId,
    weightDigest: model.weightDigest,
    kvDtype: config.kvDtype,
    blockSize: layout.blockSize,
    numLayers: layout.numLayers,
    numKvHeads: layout.numKvHeads,
    headDim: layout.headDim,
  });
  const tiers: KvBlockStore[] = [];
  if (o.hostBytes > 0) tiers.push(new HostMemoryStore({ namespace, maxBytes: o.hostBytes }));
  if (o.diskDir) {
    tiers.push(
      await DiskStore.open({
        namespace,
        dir: resolve(o.diskDir),
        maxBytes: o.diskBytes ?? 4 * 1024 ** 3,
      }),
    );
  }
  if (o.redisUrl) {
    const redis = new RedisStore({ namespace, url: o.redisUrl });
    // Writes before the connection is up would be dropped (the store never queues offline).
    if (!(await redis.ready(5_000))) {
      process.stderr.write(
        `[kvasir] Redis at ${o.redisUrl} is not reachable yet: that tier reports misses until it is\n`,
      );
    }
    tiers.push(redis);
  }
  // Write-through: a swapped-out block is in every tier before the step goes on, so a block the
  // host tier evicts is still found below it.
  const store = new TieredStore({ tiers, writeMode: 'write-through' });
  return { store, tiers };
}

/**
 * Builds a ready engine from a configuration: model (or the embedded default), memory plan,
 * KV cache, eviction policy, offload tiers, scheduler.
 */
export async function buildEngine(
  config: EngineConfig,
  options: { readonly log?: (line: string) => void } = {},
): Promise<BuiltEngine> {
  const { model, plan, path, isDefault } = await loadAndPlan(config);
  const evictionPolicy = await loadEvictionPolicy(config.evictionPolicy);
  const offload = await buildOffload(config, model);
  const runner = await model.allocate(plan.numBlocks);
  const servedModelName =
    config.servedModelName ??
    (isDefault ? DEFAULT_MODEL_NAME : basename(path).replace(/\.gguf$/i, ''));
  const engine = new KvasirEngine({
    runner,
    config,
    evictionPolicy,
    servedModelName,
    ...(offload ? { offload } : {}),
    ...(options.log ? { log: options.log } : {}),
  });
  return {
    engine,
    model,
    plan,
    modelPath: path,
    isDefaultModel: isDefault,
    offloadTiers: offload ? offload.tiers.map((t) => t.tier) : [],
    async close() {
      await engine.stop();
      await offload?.store.close();
      await runner.dispose();
    },
  };
}
