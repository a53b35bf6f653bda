import { KvCacheManager } from '@kvasir/kv-allocator';
import { SchedulerError } from '../errors.js';
import { Scheduler } from '../scheduler.js';
import type { BatchPlan, PreemptionMode, RequestOutput } from '../types.js';
import { StepCostModel, type StepShape } from './cost-model.js';
import {
  type HardwareName,
  type HardwareProfile,
  kvCapacity,
  type ModelName,
  type ModelProfile,
  resolveHardware,
  resolveModel,
} from './profiles.js';
import { generateWorkload, type SimRequest, type WorkloadSpec } from './workloads.js';

/**
 * The serving system simulated:
 * - 'kvasir': the real `Scheduler` over the real paged `KvCacheManager` (continuous batching,
 *   chunked prefill, prefix caching, preemption).
 * - 'orca': iteration-level batching, but every request reserves `maxModelLen` tokens of
 *   contiguous KV up front (Orca "Max"). Run by the same scheduler over an allocator whose one
 *   block is `maxModelLen` tokens, without prefix caching or chunking.
 * - 'static': request-level batching with contiguous max-length reservation
 *   (FasterTransformer-like): a batch is formed when the engine is idle, padded to its longest
 *   prompt, and runs until its longest output is done; every request in it returns then.
 */
export type SystemKind = 'kvasir' | 'orca' | 'static';

/** Options of `simulate`. */
export interface SimulationOptions {
  readonly model: ModelProfile | ModelName;
  readonly hardware: HardwareProfile | HardwareName;
  /** Requests (absolute arrival times), or a spec to draw them from. */
  readonly workload: readonly SimRequest[] | WorkloadSpec;
  /** Default 'kvasir'. */
  readonly system?: SystemKind;
  /** Default 0.9. */
  readonly gpuMemoryUtilization?: number;
  /** Default 1. */
  readonly tensorParallel?: number;
  /** KV block size for 'kvasir'. Default 16. */
  readonly blockSize?: number;
  /** Default 256. */
  readonly maxNumSeqs?: number;
  /** Token budget per step for 'kvasir'. Default 2048 (never below `maxModelLen` for 'orca'). */
  readonly maxNumBatchedTokens?: number;
  /** Default: the model's. */
  readonly maxModelLen?: number;
  /** 'kvasir' only. Default true. */
  readonly enablePrefixCaching?: boolean;
  /** 'kvasir' only. Default 'recompute'. */
  readonly preemptionMode?: PreemptionMode;
  /** 'kvasir' only, for swap. Default 0. */
  readonly hostSwapBlocks?: number;
  /** Fixed cost per step, seconds. Default 0.002. */
  readonly stepOverheadS?: number;
  /** Stop (and throw) after this many steps: a guard against a stuck configuration. */
  readonly maxSteps?: number;
}

/** What a simulation measured. Times are simulated seconds. */
export interface SimulationResult {
  readonly system: SystemKind;
  readonly numRequests: number;
  /** Requests that generated all their tokens. */
  readonly completed: number;
  /** Requests rejected or cut short (cannot fit the cache). */
  readonly rejected: number;
  /** Time from 0 to the last request's end. */
  readonly makespanS: number;
  readonly requestsPerS: number;
  readonly outputTokensPerS: number;
  /** Mean over requests of end-to-end latency ÷ output tokens (the PagedAttention paper's metric). */
  readonly meanNormalizedLatencyS: number;
  readonly meanLatencyS: number;
  readonly meanTtftS: number;
  readonly p99TtftS: number;
  readonly steps: number;
  /** Mean sequences per step. */
  readonly meanBatchSize: number;
  readonly preemptions: number;
  /** KV capacity in the system's own units: blocks (and tokens). */
  readonly kvBlocks: number;
  readonly kvTokens: number;
  /** Prompt tokens served from the prefix cache ÷ prompt tokens ('kvasir'). */
  readonly prefixHitRate: number;
}

class PlanShape implements StepShape {
  plan: BatchPlan | undefined;
  get numRows(): number {
    return this.plan!.rows.length;
  }
  queryLen(r: number): number {
    return this.plan!.rows[r]!.queryLen;
  }
  contextLen(r: number): number {
    return this.plan!.contextLens[r]!;
  }
  get swapBlocks(): number {
    return this.plan!.swapIn.length + this.plan!.swapOut.length;
  }
}

class Recorder {
  readonly latency: Float64Array;
  readonly normalized: Float64Array;
  readonly ttft: Float64Array;
  completed = 0;
  rejected = 0;
  ended = 0;
  lastEnd = 0;
  outputTokens = 0;
  constructor(readonly requests: readonly SimRequest[]) {
    const n = requests.length;
    this.latency = new Float64Array(n);
    this.normalized = new Float64Array(n);
    this.ttft = new Float64Array(n);
  }
  end(i: number, finish: number, firstToken: number, generated: number, ok: boolean): void {
    const r = this.requests[i]!;
    const lat = finish - r.arrivalTime;
    this.latency[i] = lat;
    this.normalized[i] = lat / Math.max(1, r.outputLen);
    this.ttft[i] = firstToken - r.arrivalTime;
    this.outputTokens += generated;
    if (ok) this.completed++;
    else this.rejected++;
    this.ended++;
    if (finish > this.lastEnd) this.lastEnd = finish;
  }
}

function mean(a: Float64Array): number {
  let s = 0;
  for (let i = 0; i < a.length; i++) s += a[i]!;
  return a.length === 0 ? 0 : s / a.length;
}

function percentile(a: Float64Array, p: number): number {
  if (a.length === 0) return 0;
  const sorted = Float64Array.from(a).sort();
  return sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))]!;
}

/**
 * Runs a workload through a simulated serving system, step by step, in simulated time: the
 * scheduler plans a step, the roofline cost model prices it, the clock advances, arrivals are
 * admitted. Deterministic: the same options give the same result.
 * @throws {SchedulerError} INVALID_CONFIG for an impossible configuration (weights that do not
 *   fit, a system that cannot make progress).
 */
export function simulate(options: SimulationOptions): SimulationResult {
  const model = resolveModel(options.model);
  const hw = resolveHardware(options.hardware);
  const maxModelLen = options.maxModelLen ?? model.maxModelLen;
  const requests = Array.isArray(options.workload)
    ? (options.workload as readonly SimRequest[])
    : generateWorkload({ maxModelLen, ...(options.workload as WorkloadSpec) });
  for (const r of requests) {
    if (r.promptTokenIds.length + r.outputLen > maxModelLen + 1) {
      throw new SchedulerError(
        'INVALID_CONFIG',
        `a request of ${r.promptTokenIds.length}+${r.outputLen} tokens exceeds maxModelLen ${maxModelLen}`,
      );
    }
  }
  const system = options.system ?? 'kvasir';
  const blockSize = options.blockSize ?? 16;
  const tp = options.tensorParallel ?? 1;
  const cap = kvCapacity(model, hw, {
    gpuMemoryUtilization: options.gpuMemoryUtilization ?? 0.9,
    tensorParallel: tp,
    blockSize,
  });
  const costModel = new StepCostModel(model, hw, {
    tensorParallel: tp,
    stepOverheadS: options.stepOverheadS ?? 0.002,
    blockSize,
  });
  const maxNumSeqs = options.maxNumSeqs ?? 256;
  const maxSteps = options.maxSteps ?? 10_000_000;
  const rec = new Recorder(requests);
  if (system === 'static') {
    return runStatic(requests, rec, costModel, cap.kvTokens, maxModelLen, maxNumSeqs, maxSteps);
  }

  const isOrca = system === 'orca';
  const kvBlocks = isOrca ? Math.floor(cap.kvTokens / maxModelLen) : cap.kvBlocks;
  if (kvBlocks < 1) {
    throw new SchedulerError('INVALID_CONFIG', 'not even one max-length request fits the cache');
  }
  const kv = new KvCacheManager({
    numBlocks: kvBlocks,
    blockSize: isOrca ? maxModelLen : blockSize,
    enablePrefixCaching: isOrca ? false : (options.enablePrefixCaching ?? true),
  });
  let now = 0;
  const budget = options.maxNumBatchedTokens ?? 2048;
  const sched = new Scheduler({
    kvCache: kv,
    maxModelLen,
    maxNumSeqs,
    maxNumBatchedTokens: isOrca ? Math.max(budget, maxModelLen) : budget,
    enableChunkedPrefill: !isOrca,
    preemptionMode: isOrca ? 'recompute' : (options.preemptionMode ?? 'recompute'),
    hostSwapBlocks: isOrca ? 0 : (options.hostSwapBlocks ?? 0),
    clock: () => now,
  });
  const shape = new PlanShape();
  const indexOf = new Map<string, number>();
  const record = (o: RequestOutput) => {
    const i = indexOf.get(o.requestId)!;
    const ok = o.finishReason === 'length' && o.reason === undefined;
    const first = o.firstTokenTime ?? o.finishTime;
    rec.end(i, o.finishTime, first, o.outputs[0]?.tokenIds.length ?? 0, ok);
  };
  let next = 0;
  let steps = 0;
  let rowsSum = 0;
  let promptTokens = 0;
  while (rec.ended < requests.length) {
    while (next < requests.length && requests[next]!.arrivalTime <= now) {
      const r = requests[next]!;
      indexOf.set(String(next), next);
      promptTokens += r.promptTokenIds.length;
      sched.add({
        id: String(next),
        promptTokenIds: r.promptTokenIds,
        maxTokens: r.outputLen,
        ignoreEos: true,
        arrivalTime: r.arrivalTime,
      });
      next++;
    }
    if (!sched.hasUnfinished()) {
      for (const o of sched.update()) record(o);
      if (next < requests.length) now = Math.max(now, requests[next]!.arrivalTime);
      continue;
    }
    const plan = sched.schedule();
    shape.plan = plan;
    const c = costModel.cost(shape);
    if (c.seconds === 0) {
      for (const o of sched.update()) record(o);
      if (rec.ended >= requests.length) break;
      if (next >= requests.length) {
        throw new SchedulerError('INVALID_CONFIG', 'simulation stalled: nothing can be scheduled');
      }
      now = Math.max(now, requests[next]!.arrivalTime);
      continue;
    }
    now += c.seconds;
    steps++;
    rowsSum += plan.rows.length;
    if (steps > maxSteps) throw new SchedulerError('INVALID_CONFIG', `more than ${maxSteps} steps`);
    // EOS is ignored, so the token values do not matter; they only feed the block hashes.
    const outs = sched.update({
      seqIds: plan.sampleSeqIds,
      tokenIds: new Int32Array(plan.sampleSeqIds.length).fill(7),
    });
    for (const o of outs) record(o);
  }
  const m = sched.metrics();
  return finish(system, rec, steps, rowsSum, m.preemptionsRecompute + m.preemptionsSwap, {
    kvBlocks,
    kvTokens: isOrca ? kvBlocks * maxModelLen : kvBlocks * blockSize,
    prefixHitRate: promptTokens === 0 ? 0 : m.prefixHitTokens / promptTokens,
  });
}

function finish(
  system: SystemKind,
  rec: Recorder,
  steps: number,
  rowsSum: number,
  preemptions: number,
  extra: { kvBlocks: number; kvTokens: number; prefixHitRate: number },
): SimulationResult {
  const makespan = rec.lastEnd;
  return {
    system,
    numRequests: rec.requests.length,
    completed: rec.completed,
    rejected: rec.rejected,
    makespanS: makespan,
    requestsPerS: makespan > 0 ? rec.completed / makespan : 0,
    outputTokensPerS: makespan > 0 ? rec.outputTokens / makespan : 0,
    meanNormalizedLatencyS: mean(rec.normalized),
    meanLatencyS: mean(rec.latency),
    meanTtftS: mean(rec.ttft),
    p99TtftS: percentile(rec.ttft, 0.99),
    steps,
    meanBatchSize: steps > 0 ? rowsSum / steps : 0,
    preemptions,
    ...extra,
  };
}

function runStatic(
  requests: readonly SimRequest[],
  rec: Recorder,
  costModel: StepCostModel,
  kvTokens: number,
  maxModelLen: number,
  maxNumSeqs: number,
  maxSteps: number,
): SimulationResult {
  const batchCap = Math.min(maxNumSeqs, Math.floor(kvTokens / maxModelLen));
  if (batchCap < 1) {
    throw new SchedulerError('INVALID_CONFIG', 'not even one max-length request fits the cache');
  }
  const shape = {
    numRows: 0,
    q: 0,
    ctx: 0,
    swapBlocks: 0,
    queryLen(): number {
      return this.q;
    },
    contextLen(): number {
      return this.ctx;
    },
  };
  let now = 0;
  let next = 0;
  let steps = 0;
  let rowsSum = 0;
  while (next < requests.length) {
    if (requests[next]!.arrivalTime > now) now = requests[next]!.arrivalTime;
    const first = next;
    while (
      next < requests.length &&
      next - first < batchCap &&
      requests[next]!.arrivalTime <= now
    ) {
      next++;
    }
    let maxPrompt = 0;
    let maxOut = 0;
    for (let i = first; i < next; i++) {
      maxPrompt = Math.max(maxPrompt, requests[i]!.promptTokenIds.length);
      maxOut = Math.max(maxOut, requests[i]!.outputLen);
    }
    shape.numRows = next - first;
    // Prefill, padded to the longest prompt; it yields the first token.
    shape.q = maxPrompt;
    shape.ctx = maxPrompt;
    now += costModel.cost(shape).seconds;
    const firstToken = now;
    steps++;
    rowsSum += shape.numRows;
    // Decode until the longest output is done; finished rows still occupy the batch.
    for (let s = 1; s < maxOut; s++) {
      shape.q = 1;
      shape.ctx = maxPrompt + s;
      now += costModel.cost(shape).seconds;
      steps++;
      rowsSum += shape.numRows;
    }
    if (steps > maxSteps) throw new SchedulerError('INVALID_CONFIG', `more than ${maxSteps} steps`);
    for (let i = first; i < next; i++) rec.end(i, now, firstToken, requests[i]!.outputLen, true);
  }
  return finish('static', rec, steps, rowsSum, 0, {
    kvBlocks: batchCap,
    kvTokens: batchCap * maxModelLen,
    prefixHitRate: 0,
  });
}
