import type { HardwareProfile, ModelProfile } from './profiles.js';

/** The shape of one step, as the cost model needs it. */
export interface StepShape {
  readonly numRows: number;
  /** Per row: new tokens computed this step. */
  queryLen(row: number): number;
  /** Per row: tokens in the KV cache after this step. */
  contextLen(row: number): number;
  /** Blocks moved between host and device before the step (swaps). */
  readonly swapBlocks: number;
}

/** Options of `StepCostModel`. */
export interface CostModelOptions {
  readonly tensorParallel?: number;
  /** Fixed cost per step (launches, scheduling, sampling, host work), seconds. Default 0.002. */
  readonly stepOverheadS?: number;
  readonly blockSize?: number;
}

/** Where a step's time goes. */
export interface StepCost {
  readonly seconds: number;
  readonly flops: number;
  readonly bytes: number;
  readonly computeBound: boolean;
}

/**
 * Roofline cost of one forward step: max(FLOPs ÷ achievable FLOP/s, bytes ÷ achievable
 * bandwidth) + a fixed overhead + swap transfer time.
 *
 * FLOPs: 2 × params per token (the dense layers) plus attention, 4 × layers × heads × head dim
 * per (query, key) pair (QKᵀ and PV), with causal pairs inside a prefill chunk.
 * Bytes: every weight once per step, each row's whole KV context once (paged attention reads
 * it once per KV head group), and the new tokens' K/V written.
 */
export class StepCostModel {
  /** Achievable FLOP/s: peak × efficiency × devices. */
  readonly flopsPerSecond: number;
  /** Achievable HBM bytes/s: bandwidth × efficiency × devices. */
  readonly bytesPerSecond: number;
  /** Weights read every step. */
  readonly weightBytes: number;
  readonly kvBytesPerToken: number;
  /** Fixed seconds added to every non-empty step. */
  readonly overheadS: number;
  /** Host-link bytes/s for swaps. */
  readonly swapBytesPerSecond: number;
  readonly blockSize: number;
  private readonly attnFlopsPerPair: number;
  private readonly denseFlopsPerToken: number;

  constructor(
    readonly model: ModelProfile,
    readonly hardware: HardwareProfile,
    options: CostModelOptions = {},
  ) {
    const tp = options.tensorParallel ?? 1;
    this.flopsPerSecond = hardware.peakTflops * 1e12 * (hardware.flopsEfficiency ?? 0.6) * tp;
    this.bytesPerSecond =
      hardware.memoryBandwidthGBps * 1e9 * (hardware.bandwidthEfficiency ?? 0.8) * tp;
    this.swapBytesPerSecond = hardware.hostLinkGBps * 1e9 * tp;
    this.weightBytes = model.numParams * model.bytesPerParam;
    this.kvBytesPerToken =
      2 * model.numLayers * model.numKvHeads * model.headDim * model.kvBytesPerElement;
    this.overheadS = options.stepOverheadS ?? 0.002;
    this.blockSize = options.blockSize ?? 16;
    this.attnFlopsPerPair = 4 * model.numLayers * model.numHeads * model.headDim;
    this.denseFlopsPerToken = 2 * model.numParams;
  }

  /** Cost of a step; an empty step costs nothing. */
  cost(step: StepShape): StepCost {
    let tokens = 0;
    let pairs = 0;
    let kvRead = 0;
    for (let r = 0; r < step.numRows; r++) {
      const q = step.queryLen(r);
      const ctx = step.contextLen(r);
      const before = ctx - q;
      tokens += q;
      // Query i of the chunk attends to before + i + 1 keys.
      pairs += q * before + (q * (q + 1)) / 2;
      kvRead += ctx;
    }
    if (tokens === 0 && step.swapBlocks === 0) {
      return { seconds: 0, flops: 0, bytes: 0, computeBound: false };
    }
    const flops = this.denseFlopsPerToken * tokens + this.attnFlopsPerPair * pairs;
    const bytes = this.weightBytes + (kvRead + tokens) * this.kvBytesPerToken;
    const tc = flops / this.flopsPerSecond;
    const tm = bytes / this.bytesPerSecond;
    const swap =
      (step.swapBlocks * this.blockSize * this.kvBytesPerToken) / this.swapBytesPerSecond;
    return {
      seconds: (tokens > 0 ? Math.max(tc, tm) + this.overheadS : 0) + swap,
      flops,
      bytes,
      computeBound: tc > tm,
    };
  }
}
