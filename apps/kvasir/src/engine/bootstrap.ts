import { basename, resolve } from 'node:path';
import {
  checkDefaultCompression,
  type DeviceMemoryInput,
  deviceMemory,
  KvasirEngine,
  type KvCompressionSetup,
  loadEvictionPolicy,
  loadKvCompression,
  loadKvConnectors,
  type MemoryPlan,
  planMemory,
} from '@kvasir/engine';
import { defaultCacheDir, type EngineConfig } from '../config.js';
import { KvEventPublisher } from '../connectors/kv-events.js';
import {
  checkPreemptionSetup,
  openOffloadTiers,
  type PreemptionSetup,
} from '../connectors/offload-tiers.js';
import type { TierEventSink } from '../connectors/tier-events.js';
import {
  DEFAULT_MODEL_NAME,
  DEFAULT_MODEL_PATH,
  ensureRandomModel,
  RANDOM_MODEL,
  RANDOM_MODEL_NAME,
} from '../default-model.js';
import { KvasirAppError } from '../errors.js';
import { nodePluginSource } from '../plugins/node-plugin-source.js';
import { hostAvailableBytes } from './host-memory.js';
import { type LoadedModel, loadModelRunner } from './load-model-runner.js';

/** An engine with everything it was built from, for banners, `info` and shutdown. */
export interface BuiltEngine {
  readonly engine: KvasirEngine;
  readonly model: LoadedModel;
  readonly plan: MemoryPlan;
  readonly modelPath: string;
  /** True when serving the default model (kvasir-mini from `@kvasir/mini-model`). */
  readonly isDefaultModel: boolean;
  /** True when serving the seeded random-weight model (`--model random`). */
  readonly isRandomModel: boolean;
  /** Names of the offload tiers in order (`host`, `disk`, `redis`). */
  readonly offloadTiers: readonly string[];
  /** What preemption does: recompute, or swap and where to. */
  readonly preemption: PreemptionSetup;
  /** Where KV events are published (`--kv-events`), with ports resolved; undefined without. */
  readonly kvEvents: { readonly pub: string; readonly replay: string | undefined } | undefined;
  /** Stops the loop, closes offload stores and releases the device. */
  close(): Promise<void>;
}

/**
 * Resolves the model path: the configured directory or `.gguf` file, the default model
 * (kvasir-mini) when none is configured, or the random-weight model, written on first use, for
 * `random`.
 */
export async function resolveModelPath(
  config: EngineConfig,
): Promise<{ path: string; isDefault: boolean; isRandom: boolean }> {
  if (config.model === RANDOM_MODEL) {
    const dir = await ensureRandomModel(
      config.cacheDir ?? defaultCacheDir(),
      config.defaultModelSeed,
    );
    return { path: dir, isDefault: false, isRandom: true };
  }
  if (config.model) return { path: resolve(config.model), isDefault: false, isRandom: false };
  return { path: DEFAULT_MODEL_PATH, isDefault: true, isRandom: false };
}

/**
 * The memory of each device of a model split by layer: a WebAssembly memory is its own (its
 * activations are the wasm backend's fixed reserve); a WebGPU device gets `--gpu-memory-bytes`
 * (or WebGPU's default) each, since WebGPU does not report it; a cpu device plans in host
 * memory. Each GPU or cpu device also keeps room for one step's activations.
 */
export function splitDeviceInputs(
  model: Pick<LoadedModel, 'devices'>,
  config: Pick<EngineConfig, 'gpuMemoryBytes' | 'gpuMemoryFraction'>,
  activationBytes: number,
  hostBytes: () => number = hostAvailableBytes,
): DeviceMemoryInput[] {
  return model.devices.map((d, i) => {
    const name = `device ${i} (${d.description}, layers ${d.firstLayer}-${d.firstLayer + d.numLayers - 1})`;
    const base = {
      name,
      numLayers: d.numLayers,
      weightBytes: d.weightBytes,
      maxLayerKvBytes: d.maxLayerKvBytes,
    };
    if (d.memoryBytes !== null) {
      return {
        ...base,
        memoryBytes: d.memoryBytes,
        memorySource: 'wasm-memory' as const,
        fraction: 1,
        reservedBytes: d.reservedBytes,
      };
    }
    const memory = deviceMemory(
      d.hostMemory ? undefined : config.gpuMemoryBytes,
      d.hostMemory ? 'cpu' : 'webgpu',
      hostBytes,
    );
    return {
      ...base,
      memoryBytes: memory.bytes,
      memorySource: memory.source,
      fraction: config.gpuMemoryFraction,
      reservedBytes: activationBytes,
    };
  });
}

/** Loads the model and plans memory without starting an engine (`kvasir info`). */
export async function loadAndPlan(config: EngineConfig): Promise<{
  model: LoadedModel;
  plan: MemoryPlan;
  path: string;
  isDefault: boolean;
  isRandom: boolean;
}> {
  const { path, isDefault, isRandom } = await resolveModelPath(config);
  const model = await loadModelRunner(path, config);
  const activationBytes = model.activationBytes(config.maxNumBatchedTokens, config.maxNumSeqs);
  const split = model.devices.length > 1;
  // Split by layer, each device is planned in its own memory (see splitDeviceInputs); the
  // host's plan holds what the host does: its devices' weights and the step's activations.
  const memory = split
    ? deviceMemory(
        model.devices.some((d) => !d.hostMemory) ? undefined : config.gpuMemoryBytes,
        'cpu',
        hostAvailableBytes,
      )
    : deviceMemory(config.gpuMemoryBytes, model.device, hostAvailableBytes);
  let plan: MemoryPlan;
  try {
    plan = planMemory({
      deviceBytes: memory.bytes,
      memorySource: memory.source,
      fraction: config.gpuMemoryFraction,
      weightBytes: split
        ? model.devices.filter((d) => d.hostMemory).reduce((a, d) => a + d.weightBytes, 0)
        : model.weightBytes,
      activationBytes,
      layout: model.kvLayout,
      maxBindingBytes: split ? Number.MAX_SAFE_INTEGER : model.maxBindingBytes,
      ...(config.numGpuBlocks === undefined ? {} : { numBlocksOverride: config.numGpuBlocks }),
      ...(split ? { devices: splitDeviceInputs(model, config, activationBytes) } : {}),
    });
  } catch (error) {
    await model.dispose();
    throw error;
  }
  return { model, plan, path, isDefault, isRandom };
}

/**
 * Builds a ready engine from a configuration: model (or the embedded default), memory plan,
 * KV cache, eviction policy, offload tiers, scheduler.
 */
export async function buildEngine(
  config: EngineConfig,
  options: { readonly log?: (line: string) => void } = {},
): Promise<BuiltEngine> {
  const { model, plan, path, isDefault, isRandom } = await loadAndPlan(config);
  let evictionPolicy: Awaited<ReturnType<typeof loadEvictionPolicy>>;
  let offload: Awaited<ReturnType<typeof openOffloadTiers>> | undefined;
  let preemption: PreemptionSetup;
  let kvCompression: KvCompressionSetup;
  let connectors: Awaited<ReturnType<typeof loadKvConnectors>>;
  let kvEvents: KvEventPublisher | undefined;
  // The tiers open before the publisher: their events reach it once it exists.
  const tierEvents: TierEventSink | undefined =
    config.kvEvents.endpoint === undefined
      ? undefined
      : {
          tierStored: (medium, hashes) => kvEvents?.tierStored(medium, hashes),
          tierRemoved: (medium, hashes) => kvEvents?.tierRemoved(medium, hashes),
        };
  try {
    const budget = { budgetMs: config.pluginBudgetMs };
    const source = nodePluginSource();
    evictionPolicy = await loadEvictionPolicy(config.evictionPolicy, source, budget);
    kvCompression = await loadKvCompression(config.kvCompression, config.blockSize, {
      ...budget,
      source,
    });
    connectors = await loadKvConnectors(config.kvConnectors, source, budget);
    checkDefaultCompression(
      kvCompression,
      config.blockSize,
      Math.min(config.maxModelLen ?? model.maxModelLen, model.maxModelLen),
    );
    offload = await openOffloadTiers(config, model, tierEvents);
    preemption = checkPreemptionSetup(config, plan, offload?.tiers.map((t) => t.tier) ?? []);
  } catch (error) {
    await offload?.store.close();
    await model.dispose();
    throw error;
  }
  let engine: KvasirEngine | undefined;
  if (config.kvEvents.endpoint !== undefined) {
    try {
      kvEvents = await KvEventPublisher.open({
        endpoint: config.kvEvents.endpoint,
        ...(config.kvEvents.replayEndpoint
          ? { replayEndpoint: config.kvEvents.replayEndpoint }
          : {}),
        topic: config.kvEvents.topic,
        encoding: config.kvEvents.encoding,
        blockSize: model.kvLayout.blockSize,
        publishedBlocks: () => engine?.kvCache.publishedBlocks() ?? [],
        ...(options.log ? { log: options.log } : {}),
      });
    } catch (error) {
      await offload?.store.close();
      await model.dispose();
      const where = [config.kvEvents.endpoint, config.kvEvents.replayEndpoint].filter(Boolean);
      throw new KvasirAppError(
        'INVALID_CONFIG',
        `--kv-events: cannot open ${where.join(' / ')}: ${(error as Error).message}`,
        { cause: error },
      );
    }
  }
  const runner = await model.allocate(plan.numBlocks);
  const servedModelName =
    config.servedModelName ??
    (isDefault
      ? DEFAULT_MODEL_NAME
      : isRandom
        ? RANDOM_MODEL_NAME
        : basename(path).replace(/\.gguf$/i, ''));
  try {
    engine = new KvasirEngine({
      runner,
      config,
      evictionPolicy,
      kvCompression,
      servedModelName,
      connectors,
      ...(offload ? { offload } : {}),
      ...(options.log ? { log: options.log } : {}),
      ...(kvEvents ? { kvEvents } : {}),
    });
  } catch (error) {
    // A user's connector factory that fails: nothing of what was opened may outlive it.
    await kvEvents?.close();
    await offload?.store.close();
    await runner.dispose();
    throw error;
  }
  const built = engine;
  return {
    engine: built,
    model,
    plan,
    modelPath: path,
    isDefaultModel: isDefault,
    isRandomModel: isRandom,
    offloadTiers: offload ? offload.tiers.map((t) => t.tier) : [],
    preemption,
    kvEvents: kvEvents?.endpoints,
    async close() {
      await built.stop();
      await kvEvents?.close();
      await offload?.store.close();
      await runner.dispose();
    },
  };
}
