// --- files, config, checkpoints (model-files) ---

export type { ChatMessage, ChatTemplateOptions } from './chat-template.js';
export { renderChatTemplate } from './chat-template.js';
export type {
  CheckpointReader,
  OpenCheckpointOptions,
  ReadChunksOptions,
  TensorInfo,
} from './checkpoint.js';
export { openCheckpoint, validateCheckpointTensors } from './checkpoint.js';
export type { TensorDtype } from './checkpoint-dtype.js';
export {
  bf16BitsToF32,
  decodeToF32,
  dequantizeQ8_0,
  dtypeByteLength,
  encodeFromF32,
  f16BitsToF32,
  f32ToBf16Bits,
  f32ToF16Bits,
  Q8_0_BLOCK_BYTES,
  Q8_0_BLOCK_VALUES,
  quantizeQ8_0,
} from './checkpoint-dtype.js';
export type {
  LoadProgress,
  LoadProgressCallback,
  LoadProgressEvent,
  LoadProgressOptions,
  TensorChunk,
} from './checkpoint-progress.js';
export { createLoadProgress, streamCheckpoint } from './checkpoint-progress.js';
export type { Architecture, ExpectedTensor, ModelConfig, RopeScaling } from './config.js';
export {
  expectedTensors,
  makeModelConfig,
  parameterCount,
  parseHfConfig,
  ropeInvFrequencies,
  toHfConfig,
  validateModelConfig,
} from './config.js';
export type { GqaConversion } from './convert-gqa.js';
export { convertToGqa, meanPoolHeads } from './convert-gqa.js';
export type { DetokenizerOptions, TokenDecoder } from './detokenizer.js';
export { IncrementalDetokenizer } from './detokenizer.js';
export type { ModelErrorCode } from './errors.js';
export { ModelError } from './errors.js';
export type {
  GgufHeader,
  GgufTensorEntry,
  GgufTensorToWrite,
  GgufTypedValue,
  GgufValueType,
} from './gguf.js';
export {
  configFromGguf,
  ggufToHfName,
  hfToGgufName,
  openGgufCheckpoint,
  permuteQkRows,
  readGgufHeader,
  writeGguf,
} from './gguf.js';
export type { ConvertToGgufOptions } from './gguf-convert.js';
export { convertToGguf } from './gguf-convert.js';
export type { RandomCheckpoint, RandomCheckpointOptions } from './random-checkpoint.js';
export {
  LLAMA3_CHAT_TEMPLATE,
  RANDOM_SPECIAL_TOKENS,
  randomTensors,
  writeRandomCheckpoint,
} from './random-checkpoint.js';
export type { SafetensorsEntry, SafetensorsHeader, TensorToWrite } from './safetensors.js';
export {
  openSafetensorsCheckpoint,
  readSafetensorsHeader,
  writeSafetensors,
} from './safetensors.js';
export type { SampleResult, SamplingParams, TokenLogprob } from './sampling.js';
export {
  applyPenalties,
  logprobs,
  Sampler,
  SamplingState,
  sample,
  validateSamplingParams,
} from './sampling.js';
export { Rng } from './sampling-rng.js';
export type { TokenizerFiles } from './tokenizer.js';
export { ModelTokenizer } from './tokenizer.js';
export type { GgufTokenizerJson } from './tokenizer-gguf.js';
export {
  ggufTokenizerMetadata,
  LLAMA3_SPLIT_PATTERN,
  QWEN2_SPLIT_PATTERN,
  tokenizerJsonFromGguf,
} from './tokenizer-gguf.js';
export type { ByteLevelBpe, ByteLevelTokenizerSpec } from './tokenizer-train.js';
export {
  buildByteLevelTokenizerJson,
  byteLevelAlphabet,
  GPT2_SPLIT_PATTERN,
  trainByteLevelBpe,
} from './tokenizer-train.js';

// --- end model-files ---

export { CpuForward, pagedAttentionCpu } from './forward-cpu.js';
export type {
  ForwardBlockCopy,
  ForwardPlan,
  ForwardSeq,
  NormalizedPlan,
  PlanLimits,
} from './forward-plan.js';
export { normalizePlan } from './forward-plan.js';
export { applyRopeRows, ropeTables } from './forward-rope.js';
// --- execution (model-exec) ---
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
export { ropeKvWriteWgsl } from './kernels/rope-kv-write.wgsl.js';
export type { PackedWeight, WeightFormat } from './kernels/weight-format.js';
export {
  DEFAULT_INT8_GROUP_SIZE,
  packRows,
  packWeight,
  unpackRow,
  unpackWeight,
  wordsPerRow,
} from './kernels/weight-format.js';
export { kvBlockBytes } from './kv-blocks.js';
export type { KvCacheSpec, KvFormatName } from './kv-cache.js';
export { kvCacheSpec, kvRowWord } from './kv-cache.js';
export type { LoadModelOptions, Model } from './model.js';
export { loadModel } from './model.js';
export type { GenerateOptions } from './model-generate.js';
export { generate } from './model-generate.js';
export type {
  LayerWeights,
  LoadWeightsOptions,
  ModelWeights,
  WeightAllocator,
  WeightSink,
} from './weights.js';
export { hostAllocator, loadWeights } from './weights.js';
// --- end model-exec ---
