// `@kvasir/model/kernels`: the pieces a backend is built from. The dense WGSL kernels and
// their CPU references, the weight formats and loader, the plan a backend runs, the KV cache
// word arithmetic, the CPU reference forward pass, and the model's RoPE configuration (the
// RoPE math itself is `@kvasir/attention-kernels`').

export { CpuForward, pagedAttentionCpu } from '../backends/cpu/cpu-forward.js';
export { ropeConfig } from '../config.js';
export { BACKENDS } from '../execution/backend-select.js';
export type { Executor, ExecutorContext } from '../execution/executor.js';
export type { NormalizedPlan, PlanLimits } from '../execution/forward-plan.js';
export { normalizePlan } from '../execution/forward-plan.js';
export type { KvBlockIo } from '../execution/kv-blocks.js';
export { kvRowWord } from '../execution/kv-cache.js';
export type {
  LayerWeights,
  LoadWeightsOptions,
  ModelWeights,
  WeightAllocator,
  WeightSink,
} from '../execution/weights.js';
export { hostAllocator, loadBlockWeights, loadWeights } from '../execution/weights.js';
export type { GpuWeight } from './dense-kernels.js';
export { DenseKernels, GEMV_MAX_ROWS } from './dense-kernels.js';
export { addWgsl, biasAddWgsl, swigluWgsl } from './elementwise.wgsl.js';
export { embeddingWgsl } from './embedding.wgsl.js';
export { gemvWgsl, tiledMatmulWgsl } from './matmul.wgsl.js';
export type { MatmulEpilogue } from './reference.js';
export {
  addRef,
  biasAddRef,
  embeddingRef,
  matmulRef,
  rmsNormRef,
  silu,
  swigluRef,
} from './reference.js';
export { rmsNormWgsl } from './rms-norm.wgsl.js';
export type { RopeKvWriteOptions } from './rope-kv-write.wgsl.js';
export { ropeKvWriteWgsl } from './rope-kv-write.wgsl.js';
export type {
  GgmlWeight,
  PackedWeight,
  StoredFormat,
  StoredWeight,
  WeightFormat,
} from './weight-format.js';
export {
  DEFAULT_INT8_GROUP_SIZE,
  isGgmlFormat,
  isGgmlWeight,
  packRows,
  packWeight,
  unpackRow,
  unpackWeight,
  weightRowBytes,
  weightWords,
  wordsPerRow,
} from './weight-format.js';
