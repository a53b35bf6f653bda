import {
  blocksThatFit,
  type KvLayout,
  kvBytesPerBlock,
  kvBytesPerToken,
} from '@kvasir/kv-allocator';
import { KvasirEngineError } from './errors.js';

/** What WebGPU gets planned with when not told: it cannot report its memory. */
export const WEBGPU_DEFAULT_MEMORY_BYTES = 512 * 1024 * 1024;

/** Where the memory a plan splits comes from. */
export type MemorySource = 'configured' | 'webgpu-default' | 'host-available';

/**
 * The memory to plan with: the configured bytes; else, on the CPU backend (whose weights, KV
 * cache and activations are all host memory), the host's available memory; else WebGPU's
 * fixed default. `hostBytes` reads the host's available memory (the app's `hostAvailableBytes`
 * in Node; a page passes what it may use).
 */
export function deviceMemory(
  configured: number | undefined,
  device: 'webgpu' | 'cpu',
  hostBytes: () => number,
): { readonly bytes: number; readonly source: MemorySource } {
  if (configured !== undefined) return { bytes: configured, source: 'configured' };
  if (device === 'cpu') return { bytes: hostBytes(), source: 'host-available' };
  return { bytes: WEBGPU_DEFAULT_MEMORY_BYTES, source: 'webgpu-default' };
}

/** Inputs of {@link planMemory}. */
export interface MemoryPlanInput {
  /** Device memory the engine may plan with (bytes). */
  readonly deviceBytes: number;
  /** Where `deviceBytes` came from (default `configured`). */
  readonly memorySource?: MemorySource;
  /** Fraction of it for weights + activations + KV cache. */
  readonly fraction: number;
  /** Weights as resident on the device. */
  readonly weightBytes: number;
  /** Activations and scratch for one step (batch × widths), reserved before the KV cache. */
  readonly activationBytes: number;
  readonly layout: KvLayout;
  /** Largest storage buffer one layer's cache may use (`maxStorageBufferBindingSize`). */
  readonly maxBindingBytes: number;
  /** Forced block count (tests): used as is when it fits. */
  readonly numBlocksOverride?: number;
  /**
   * A model split by layer: each device's own memory, which must hold its weights, its
   * layers' share of every block and its activations (a block id is the same block on every
   * device, so the device with the least room bounds the block count). Then `deviceBytes`,
   * `weightBytes` and `activationBytes` are the host's part: the host devices' weights and the
   * step's activations, within the host memory.
   */
  readonly devices?: readonly DeviceMemoryInput[];
}

/** Where one device's memory figure comes from. */
export type DeviceMemorySource = MemorySource | 'wasm-memory';

/** One device of a model split by layer, as {@link planMemory} takes it. */
export interface DeviceMemoryInput {
  /** The device in words, for messages (`device 1 (wasm ..., layers 26-27)`). */
  readonly name: string;
  readonly numLayers: number;
  /** Its weights. */
  readonly weightBytes: number;
  /** Its memory, and where the figure came from. */
  readonly memoryBytes: number;
  readonly memorySource: DeviceMemorySource;
  /**
   * Fraction of it the model may use: the plan's fraction for a GPU, which other programs
   * share; 1 for a WebAssembly memory, which is the model's alone.
   */
  readonly fraction: number;
  /** Bytes kept on it for the step's activations. */
  readonly reservedBytes: number;
  /** Most bytes one of its layers' cache may take. */
  readonly maxLayerKvBytes: number;
}

/** One device's share of a {@link MemoryPlan}. */
export interface DeviceMemoryPlan extends DeviceMemoryInput {
  /** `fraction` of its memory. */
  readonly budgetBytes: number;
  /** Its layers' part of every block. */
  readonly kvCacheBytes: number;
  /** Most blocks its memory (and its layer limit) could hold. */
  readonly maxBlocks: number;
}

/** How the device memory is split, as `kvasir info` prints it. */
export interface MemoryPlan {
  /** The memory split (`fraction` of it is the budget), and where that figure came from. */
  readonly deviceBytes: number;
  readonly memorySource: MemorySource;
  readonly budgetBytes: number;
  readonly weightBytes: number;
  readonly activationBytes: number;
  readonly kvBytesPerToken: number;
  readonly kvBytesPerBlock: number;
  /** Blocks of the paged cache. */
  readonly numBlocks: number;
  /** Tokens those blocks hold. */
  readonly numTokens: number;
  readonly kvCacheBytes: number;
  /** What bounded the block count: host or device memory, a layer's binding, or a forced count. */
  readonly limitedBy: 'memory' | 'binding-size' | 'override' | 'device';
  /** With `limitedBy: 'device'`, which device of {@link devices}. */
  readonly limitingDevice?: number;
  /** A model split by layer: each device's budget, weights and cache, in layer order. */
  readonly devices?: readonly DeviceMemoryPlan[];
}

/**
 * Splits device memory between weights, activations and the paged KV cache: blocks =
 * (budget − weights − activations) ÷ bytes per block, capped so that one layer's cache fits a
 * single storage binding.
 * A model split by layer is bounded as well by each device's own memory (see
 * {@link MemoryPlanInput.devices}).
 * @throws KvasirEngineError `OUT_OF_MEMORY` when not even one block fits after the weights;
 *   `INVALID_CONFIG` when a forced block count exceeds what one buffer per layer holds, or
 *   when a device of a split model cannot hold its weights and one block (the message names
 *   the device and its numbers).
 */
export function planMemory(input: MemoryPlanInput): MemoryPlan {
  const perToken = kvBytesPerToken(input.layout);
  const perBlock = kvBytesPerBlock(input.layout);
  const budget = Math.floor(input.deviceBytes * input.fraction);
  const free = budget - input.weightBytes - input.activationBytes;
  const byMemory = free > 0 ? blocksThatFit(input.layout, free) : 0;
  const perLayerBlock = perBlock / input.layout.numLayers;
  const byBinding = Math.floor(input.maxBindingBytes / perLayerBlock);
  let numBlocks = Math.min(byMemory, byBinding);
  let limitedBy: MemoryPlan['limitedBy'] = byMemory <= byBinding ? 'memory' : 'binding-size';
  let limitingDevice: number | undefined;
  const devices = input.devices?.map((d) => deviceShare(d, perLayerBlock));
  for (const [i, d] of (devices ?? []).entries()) {
    if (d.maxBlocks < 1) {
      throw new KvasirEngineError(
        'INVALID_CONFIG',
        `${d.name}: its weights (${formatBytes(d.weightBytes)}) and activations (${formatBytes(d.reservedBytes)}) leave no room for its part of one KV block (${formatBytes(perLayerBlock * d.numLayers)}) in its budget of ${formatBytes(d.budgetBytes)} (${budgetWords(d)}): give it fewer layers`,
        { details: { device: i, budget: d.budgetBytes, weights: d.weightBytes } },
      );
    }
    if (d.maxBlocks <= numBlocks) {
      numBlocks = d.maxBlocks;
      limitedBy = 'device';
      limitingDevice = i;
    }
  }
  if (input.numBlocksOverride !== undefined) {
    for (const [i, d] of (devices ?? []).entries()) {
      if (input.numBlocksOverride > d.maxBlocks) {
        throw new KvasirEngineError(
          'INVALID_CONFIG',
          `--num-gpu-blocks: ${input.numBlocksOverride} blocks do not fit ${d.name}, whose budget of ${formatBytes(d.budgetBytes)} (${budgetWords(d)}) holds its weights (${formatBytes(d.weightBytes)}), activations and ${d.maxBlocks} blocks`,
          { details: { numGpuBlocks: input.numBlocksOverride, device: i, max: d.maxBlocks } },
        );
      }
    }
    if (input.numBlocksOverride > byBinding) {
      throw new KvasirEngineError(
        'INVALID_CONFIG',
        `--num-gpu-blocks: ${input.numBlocksOverride} blocks do not fit: one layer's cache must fit one buffer of at most ${input.maxBindingBytes} B on this backend, which holds ${byBinding} blocks`,
        { details: { numGpuBlocks: input.numBlocksOverride, max: byBinding } },
      );
    }
    numBlocks = input.numBlocksOverride;
    limitedBy = 'override';
    limitingDevice = undefined;
  }
  if (numBlocks < 1) {
    throw new KvasirEngineError(
      'OUT_OF_MEMORY',
      `no room for the KV cache: budget ${budget} B, weights ${input.weightBytes} B, activations ${input.activationBytes} B, one block ${perBlock} B; raise --gpu-memory-fraction or --gpu-memory-bytes`,
      { details: { budget, perBlock } },
    );
  }
  return {
    deviceBytes: input.deviceBytes,
    memorySource: input.memorySource ?? 'configured',
    budgetBytes: budget,
    weightBytes: input.weightBytes,
    activationBytes: input.activationBytes,
    kvBytesPerToken: perToken,
    kvBytesPerBlock: perBlock,
    numBlocks,
    numTokens: numBlocks * input.layout.blockSize,
    kvCacheBytes: numBlocks * perBlock,
    limitedBy,
    ...(limitingDevice === undefined ? {} : { limitingDevice }),
    ...(devices === undefined
      ? {}
      : {
          devices: devices.map((d) => ({
            ...d,
            kvCacheBytes: numBlocks * perLayerBlock * d.numLayers,
          })),
        }),
  };
}

/** A device's budget and the most blocks it holds, before the block count is known. */
function deviceShare(d: DeviceMemoryInput, perLayerBlock: number): DeviceMemoryPlan {
  const budgetBytes = Math.floor(d.memoryBytes * d.fraction);
  const free = budgetBytes - d.weightBytes - d.reservedBytes;
  const byMemory = free > 0 ? Math.floor(free / (perLayerBlock * d.numLayers)) : 0;
  const byBinding = Math.floor(d.maxLayerKvBytes / perLayerBlock);
  return { ...d, budgetBytes, kvCacheBytes: 0, maxBlocks: Math.min(byMemory, byBinding) };
}

/** Where a device's budget comes from, in words. */
export function budgetWords(
  d: Pick<DeviceMemoryInput, 'fraction' | 'memorySource' | 'memoryBytes'>,
): string {
  const what = {
    'wasm-memory': 'its WebAssembly memory',
    configured: '--gpu-memory-bytes',
    'webgpu-default':
      "WebGPU's default, as WebGPU does not report its memory: set --gpu-memory-bytes",
    'host-available': 'host memory available',
  }[d.memorySource];
  return d.fraction === 1 ? what : `${d.fraction} × ${formatBytes(d.memoryBytes)}, ${what}`;
}

/**
 * A split device's memory in words: `, budget 4.0 GiB (its WebAssembly memory), room for 60
 * blocks`; empty for one device, whose plan has its own lines.
 */
export function deviceBudgetText(plan: MemoryPlan, device: number): string {
  const d = plan.devices?.[device];
  if (d === undefined) return '';
  return `, budget ${formatBytes(d.budgetBytes)} (${budgetWords(d)}), room for ${d.maxBlocks} blocks`;
}

/** Human-readable bytes (binary units). */
export function formatBytes(bytes: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = bytes;
  let u = 0;
  while (v >= 1024 && u < units.length - 1) {
    v /= 1024;
    u++;
  }
  return `${v >= 100 || u === 0 ? v.toFixed(0) : v.toFixed(1)} ${units[u]}`;
}
