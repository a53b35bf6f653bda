import { freemem } from 'node:os';
import {
  blocksThatFit,
  type KvLayout,
  kvBytesPerBlock,
  kvBytesPerToken,
} from '@kvasir/kv-allocator';
import { KvasirAppError } from '../errors.js';

/** What WebGPU gets planned with when not told: it cannot report its memory. */
export const WEBGPU_DEFAULT_MEMORY_BYTES = 512 * 1024 * 1024;

/** Where the memory a plan splits comes from. */
export type MemorySource = 'configured' | 'webgpu-default' | 'host-available';

/**
 * Host memory this process may still take: what the OS reports available, within a cgroup
 * (container) limit when there is one.
 */
export function hostAvailableBytes(): number {
  const available = freemem();
  const limit = process.constrainedMemory?.() ?? 0;
  return limit > 0 && limit < available ? limit : available;
}

/**
 * The memory to plan with: the configured bytes; else, on the CPU backend (whose weights, KV
 * cache and activations are all host memory), the host's available memory; else WebGPU's
 * fixed default.
 */
export function deviceMemory(
  configured: number | undefined,
  device: 'webgpu' | 'cpu',
  hostBytes: () => number = hostAvailableBytes,
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
  /** What bounded the block count. */
  readonly limitedBy: 'memory' | 'binding-size' | 'override';
}

/**
 * Splits device memory between weights, activations and the paged KV cache: blocks =
 * (budget − weights − activations) ÷ bytes per block, capped so that one layer's cache fits a
 * single storage binding.
 * @throws KvasirAppError `OUT_OF_MEMORY` when not even one block fits after the weights;
 *   `INVALID_CONFIG` when a forced block count exceeds what one buffer per layer holds.
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
  if (input.numBlocksOverride !== undefined) {
    if (input.numBlocksOverride > byBinding) {
      throw new KvasirAppError(
        'INVALID_CONFIG',
        `--num-gpu-blocks: ${input.numBlocksOverride} blocks do not fit: one layer's cache must fit one buffer of at most ${input.maxBindingBytes} B on this backend, which holds ${byBinding} blocks`,
        { details: { numGpuBlocks: input.numBlocksOverride, max: byBinding } },
      );
    }
    numBlocks = input.numBlocksOverride;
    limitedBy = 'override';
  }
  if (numBlocks < 1) {
    throw new KvasirAppError(
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
  };
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
