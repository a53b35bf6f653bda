// --- files, config, checkpoints (model-files) ---

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
export { openGgufCheckpoint } from './gguf.js';
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
export type { ByteLevelBpe, ByteLevelTokenizerSpec } from './tokenizer-train.js';
export {
  buildByteLevelTokenizerJson,
  byteLevelAlphabet,
  GPT2_SPLIT_PATTERN,
  trainByteLevelBpe,
} from './tokenizer-train.js';
// --- end model-files ---
