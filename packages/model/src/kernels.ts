// `@kvasir/model/kernels`: the pieces a backend is built from. The dense WGSL kernels and
// their CPU references, the weight formats and loader, the plan a backend runs, the KV cache
// word arithmetic, the CPU reference forward pass, and the model's RoPE configuration (the
// RoPE math itself is `@kvasir/attention-kernels`').

export { CpuForward, pagedAttentionCpu } from './backends/cpu/cpu-forward.js';
export { ropeConfig } from './config.js';
export type { Executor, ExecutorContext } from './execution/executor.js';
export type { NormalizedPlan, PlanLimits } from './execution/forward-plan.js';
export { normalizePlan } from './execution/forward-plan.js';
export type { KvBlockIo } from './execution/kv-blocks.js';
export { kvRowWord } from './execution/kv-cache.js';
export type {
  LayerWeights,
  LoadWeightsOptions,
  ModelWeights,
  WeightAllocator,
  WeightSink,
} from './execution/weights.js';
export { hostAllocator, loadBlockWeights, loadWeights } from './execution/weights.js';
export type { GpuWeight } from './kernels/dense-kernels.js';
export { DenseKernels, GEMV_MAX_ROWS } from './kernels/dense-kernels.js';
export { addWgsl, biasAddWgsl, swigluWgsl } from './kernels/elementwise.wgsl.js';
export { embeddingWgsl } from './kernels/embedding.wgsl.js';
export { gemvWgsl, tiledMatmulWgsl } from './kernels/matmul.wgsl.js';
export type { MatmulEpilogue } from './kernels/reference.js';
export {
  addRef,
  biasAddRef,
  embeddingRef,
  matmulRef,
  rmsNormRef,
  silu,
  swigluRef,
} from './kernels/reference.js';
export { rmsNormWgsl } from './kernels/rms-norm.wgsl.js';
export type { RopeKvWriteOptions } from './kernels/rope-kv-write.wgsl.js';
export { ropeKvWriteWgsl } from './kernels/rope-kv-write.wgsl.js';
export type {
  GgmlWeight,
  PackedWeight,
  StoredFormat,
  StoredWeight,
  WeightFormat,
} from './kernels/weight-format.js';
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
} from './kernels/weight-format.js';
export { BACKENDS } from './model/backend-select.js';
