import { type KvLayout, kvBytesPerBlock, kvBytesPerToken } from '@kvasir/kv-allocator';
import { SchedulerError } from '../errors.js';

/** An accelerator, as the roofline cost model sees it. */
export interface HardwareProfile {
  readonly name: string;
  /** Dense f16/bf16 tensor throughput, TFLOP/s. */
  readonly peakTflops: number;
  /** HBM bandwidth, GB/s (10^9 bytes). */
  readonly memoryBandwidthGBps: number;
  /** Device memory, GB (10^9 bytes). */
  readonly memoryGB: number;
  /** Host ↔ device bandwidth for swaps, GB/s. */
  readonly hostLinkGBps: number;
  /**
   * Fractions of peak that real kernels reach (model FLOPs utilization, achieved bandwidth).
   * Stated assumptions, not measurements: 0.6 and 0.8 by default.
   */
  readonly flopsEfficiency?: number;
  readonly bandwidthEfficiency?: number;
}

/** A decoder-only transformer, as the cost model and the KV arithmetic see it. */
export interface ModelProfile {
  readonly name: string;
  readonly numParams: number;
  readonly numLayers: number;
  readonly numHeads: number;
  readonly numKvHeads: number;
  readonly headDim: number;
  /** Bytes per weight (2 for f16/bf16). */
  readonly bytesPerParam: number;
  /** Bytes per KV element (2 for f16; 1 for int8/fp8 KV). */
  readonly kvBytesPerElement: number;
  /** Longest sequence the model serves. */
  readonly maxModelLen: number;
}

/** Public datasheet figures (SXM parts). */
export const HARDWARE = {
  'A100-40GB': {
    name: 'A100-40GB',
    peakTflops: 312,
    memoryBandwidthGBps: 1555,
    memoryGB: 40,
    hostLinkGBps: 25,
  },
  'H100-80GB': {
    name: 'H100-80GB',
    peakTflops: 989,
    memoryBandwidthGBps: 3350,
    memoryGB: 80,
    hostLinkGBps: 50,
  },
  H200: {
    name: 'H200',
    peakTflops: 989,
    memoryBandwidthGBps: 4800,
    memoryGB: 141,
    hostLinkGBps: 50,
  },
} as const satisfies Record<string, HardwareProfile>;

/** Names of the built-in hardware profiles. */
export type HardwareName = keyof typeof HARDWARE;

/** Architectures from the models' published configs. */
export const MODELS = {
  'OPT-13B': {
    name: 'OPT-13B',
    numParams: 12.85e9,
    numLayers: 40,
    numHeads: 40,
    numKvHeads: 40,
    headDim: 128,
    bytesPerParam: 2,
    kvBytesPerElement: 2,
    maxModelLen: 2048,
  },
  'Llama-3-8B': {
    name: 'Llama-3-8B',
    numParams: 8.03e9,
    numLayers: 32,
    numHeads: 32,
    numKvHeads: 8,
    headDim: 128,
    bytesPerParam: 2,
    kvBytesPerElement: 2,
    maxModelLen: 8192,
  },
  'Llama-2-70B': {
    name: 'Llama-2-70B',
    numParams: 68.98e9,
    numLayers: 80,
    numHeads: 64,
    numKvHeads: 8,
    headDim: 128,
    bytesPerParam: 2,
    kvBytesPerElement: 2,
    maxModelLen: 4096,
  },
} as const satisfies Record<string, ModelProfile>;

/** Names of the built-in model profiles. */
export type ModelName = keyof typeof MODELS;

/**
 * A profile by name, or the profile itself.
 * @throws {SchedulerError} INVALID_CONFIG for an unknown name.
 */
export function resolveHardware(h: HardwareProfile | HardwareName): HardwareProfile {
  if (typeof h !== 'string') return h;
  const p = (HARDWARE as Record<string, HardwareProfile>)[h];
  if (!p) {
    throw new SchedulerError(
      'INVALID_CONFIG',
      `unknown hardware ${h}; known: ${Object.keys(HARDWARE).join(', ')}`,
    );
  }
  return p;
}

/**
 * A profile by name, or the profile itself.
 * @throws {SchedulerError} INVALID_CONFIG for an unknown name.
 */
export function resolveModel(m: ModelProfile | ModelName): ModelProfile {
  if (typeof m !== 'string') return m;
  const p = (MODELS as Record<string, ModelProfile>)[m];
  if (!p) {
    throw new SchedulerError(
      'INVALID_CONFIG',
      `unknown model ${m}; known: ${Object.keys(MODELS).join(', ')}`,
    );
  }
  return p;
}

/** The KV layout of a model profile. */
export function modelKvLayout(model: ModelProfile, blockSize: number): KvLayout {
  return {
    numLayers: model.numLayers,
    numKvHeads: model.numKvHeads,
    headDim: model.headDim,
    blockSize,
    bytesPerElement: model.kvBytesPerElement,
  };
}

/** Options of `kvCapacity`. */
export interface CapacityOptions {
  /** Fraction of device memory the engine may use (vLLM's gpu_memory_utilization). Default 0.9. */
  readonly gpuMemoryUtilization?: number;
  /** Devices the model is sharded over (memory, FLOPs and bandwidth scale). Default 1. */
  readonly tensorParallel?: number;
  /** Tokens per KV block. Default 16. */
  readonly blockSize?: number;
}

/** How much KV cache a model gets on a device. */
export interface KvCapacity {
  readonly weightBytes: number;
  readonly kvBytesPerToken: number;
  readonly kvBytesPerBlock: number;
  readonly kvBytes: number;
  readonly kvBlocks: number;
  readonly kvTokens: number;
}

/**
 * KV capacity = (memory × utilization − weights) ÷ bytes per block.
 * @throws {SchedulerError} INVALID_CONFIG when the weights alone do not fit.
 */
export function kvCapacity(
  modelIn: ModelProfile | ModelName,
  hardwareIn: HardwareProfile | HardwareName,
  options: CapacityOptions = {},
): KvCapacity {
  const model = resolveModel(modelIn);
  const hw = resolveHardware(hardwareIn);
  const util = options.gpuMemoryUtilization ?? 0.9;
  const tp = options.tensorParallel ?? 1;
  const blockSize = options.blockSize ?? 16;
  const layout = modelKvLayout(model, blockSize);
  const weightBytes = model.numParams * model.bytesPerParam;
  const kvBytes = hw.memoryGB * 1e9 * tp * util - weightBytes;
  const perBlock = kvBytesPerBlock(layout);
  const kvBlocks = Math.floor(kvBytes / perBlock);
  if (kvBlocks < 1) {
    throw new SchedulerError(
      'INVALID_CONFIG',
      `${model.name} weights (${(weightBytes / 1e9).toFixed(1)} GB) leave no KV room on ${tp}× ${hw.name} at utilization ${util}`,
    );
  }
  return {
    weightBytes,
    kvBytesPerToken: kvBytesPerToken(layout),
    kvBytesPerBlock: perBlock,
    kvBytes,
    kvBlocks,
    kvTokens: kvBlocks * blockSize,
  };
}
