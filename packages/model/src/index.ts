// --- files, config, checkpoints (model-files) ---

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
export type { ModelErrorCode } from './errors.js';
export { ModelError } from './errors.js';
export type {
  CheckpointReader,
  OpenCheckpointOptions,
  ReadChunksOptions,
  TensorInfo,
} from './formats/checkpoint-reader.js';
export { validateCheckpointTensors } from './formats/checkpoint-reader.js';
export type {
  LoadProgress,
  LoadProgressCallback,
  LoadProgressEvent,
  LoadProgressOptions,
  TensorChunk,
} from './formats/checkpoint-stream.js';
export { createLoadProgress, streamCheckpoint } from './formats/checkpoint-stream.js';
export type { GqaConversion } from './formats/convert-gqa.js';
export { convertToGqa, meanPoolHeads } from './formats/convert-gqa.js';
export type { TensorDtype } from './formats/dtype.js';
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
} from './formats/dtype.js';
export { configFromGguf } from './formats/gguf/config-from-metadata.js';
export type { ConvertToGgufOptions } from './formats/gguf/convert.js';
export { convertToGguf } from './formats/gguf/convert.js';
export type { GgufHeader, GgufTensorEntry } from './formats/gguf/header.js';
export { readGgufHeader } from './formats/gguf/header.js';
export { permuteQkRows } from './formats/gguf/qk-permute.js';
export { openGgufCheckpoint } from './formats/gguf/reader.js';
export { ggufToHfName, hfToGgufName } from './formats/gguf/tensor-names.js';
export type { GgufTypedValue, GgufValueType } from './formats/gguf/value-types.js';
export type { GgufTensorToWrite } from './formats/gguf/writer.js';
export { writeGguf } from './formats/gguf/writer.js';
export { openCheckpoint } from './formats/open-checkpoint.js';
export type { RandomCheckpoint, RandomCheckpointOptions } from './formats/random-checkpoint.js';
export {
  LLAMA3_CHAT_TEMPLATE,
  RANDOM_SPECIAL_TOKENS,
  randomTensors,
  writeRandomCheckpoint,
} from './formats/random-checkpoint.js';
export type { SafetensorsEntry, SafetensorsHeader, TensorToWrite } from './formats/safetensors.js';
export {
  openSafetensorsCheckpoint,
  readSafetensorsHeader,
  writeSafetensors,
} from './formats/safetensors.js';
export { Rng } from './sampling/rng.js';
export type { SampleResult, SamplingParams, TokenLogprob } from './sampling/sampler.js';
export {
  applyPenalties,
  logprobs,
  Sampler,
  SamplingState,
  sample,
  validateSamplingParams,
} from './sampling/sampler.js';
export type { ByteLevelBpe, ByteLevelTokenizerSpec } from './tokenizer/byte-level-bpe.js';
export {
  buildByteLevelTokenizerJson,
  byteLevelAlphabet,
  GPT2_SPLIT_PATTERN,
  trainByteLevelBpe,
} from './tokenizer/byte-level-bpe.js';
export type { ChatMessage, ChatTemplateOptions } from './tokenizer/chat-template.js';
export { renderChatTemplate } from './tokenizer/chat-template.js';
export type { DetokenizerOptions, TokenDecoder } from './tokenizer/detokenizer.js';
export { IncrementalDetokenizer } from './tokenizer/detokenizer.js';
export type { GgufTokenizerJson } from './tokenizer/gguf-tokenizer.js';
export {
  ggufTokenizerMetadata,
  LLAMA3_SPLIT_PATTERN,
  QWEN2_SPLIT_PATTERN,
  tokenizerJsonFromGguf,
} from './tokenizer/gguf-tokenizer.js';
export type { TokenizerFiles } from './tokenizer/tokenizer.js';
export { ModelTokenizer } from './tokenizer/tokenizer.js';

// --- end model-files ---

export { CpuForward, pagedAttentionCpu } from './backends/cpu/cpu-forward.js';
export type {
  ForwardBlockCopy,
  ForwardPlan,
  ForwardRow,
  NormalizedPlan,
  PlanLimits,
} from './execution/forward-plan.js';
export { normalizePlan } from './execution/forward-plan.js';
export type { GenerateOptions } from './execution/generate.js';
export { generate } from './execution/generate.js';
export { kvBlockBytes } from './execution/kv-blocks.js';
export type { KvCacheSpec, KvFormatName } from './execution/kv-cache.js';
export { kvCacheSpec, kvRowWord } from './execution/kv-cache.js';
export type { LoadModelOptions, Model } from './execution/model.js';
export { loadModel } from './execution/model.js';
export { applyRopeRows, ropeTables } from './execution/rope.js';
export type {
  LayerWeights,
  LoadWeightsOptions,
  ModelWeights,
  WeightAllocator,
  WeightSink,
} from './execution/weights.js';
export { hostAllocator, loadWeights } from './execution/weights.js';
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
// --- end model-exec ---
