// What an application needs: load a checkpoint, run it, sample, tokenize. The checkpoint
// formats are in `@kvasir/model/formats`, the kernels and backend pieces in `@kvasir/model/kernels`.

export { wasmMemoryLimit } from './backends/wasm/wasm-arena.js';
export type {
  Architecture,
  ExpectedTensor,
  ModelConfig,
  MoeConfig,
  RopeScaling,
} from './config.js';
export {
  expectedTensors,
  layerWindow,
  makeModelConfig,
  parameterCount,
  parseHfConfig,
  toHfConfig,
  validateModelConfig,
  withContextLength,
} from './config.js';
export type { ModelErrorCode } from './errors.js';
export { ModelError } from './errors.js';
export type { LayerSlice } from './execution/executor.js';
export type {
  ForwardBlockCopy,
  ForwardKeyShift,
  ForwardPlan,
  ForwardRow,
} from './execution/forward-plan.js';
export { kvBlockBytes } from './execution/kv-blocks.js';
export type { KvCacheSpec, KvFormatName } from './execution/kv-cache.js';
export { kvCacheSpec } from './execution/kv-cache.js';
export type { ForwardKvGroup, KvGroups } from './execution/kv-groups.js';
export type {
  CheckpointReader,
  OpenCheckpointOptions,
  ReadChunksOptions,
  TensorInfo,
} from './formats/checkpoint-reader.js';
export type {
  LoadProgress,
  LoadProgressCallback,
  LoadProgressEvent,
  LoadProgressOptions,
  TensorChunk,
} from './formats/checkpoint-stream.js';
export { createLoadProgress, streamCheckpoint } from './formats/checkpoint-stream.js';
export type { GqaConversion } from './formats/convert-gqa.js';
export { convertToGqa } from './formats/convert-gqa.js';
export type { TensorDtype } from './formats/dtype.js';
export type { OpenGgufBytesOptions } from './formats/gguf/reader.js';
export { openGgufBytes } from './formats/gguf/reader.js';
export { openCheckpoint } from './formats/open-checkpoint.js';
export type { RandomCheckpoint, RandomCheckpointOptions } from './formats/random-checkpoint.js';
export {
  LLAMA3_CHAT_TEMPLATE,
  RANDOM_SPECIAL_TOKENS,
  writeRandomCheckpoint,
} from './formats/random-checkpoint.js';
export type { WeightSummary, WeightTypeCount } from './formats/weight-summary.js';
export { summarizeWeights } from './formats/weight-summary.js';
export type {
  CompiledConstraint,
  ConstraintCompiler,
  OutputConstraint,
  OutputConstraintKind,
  StructuralFormat,
  StructuralTagFormat,
  TokenBitmask,
  TokenMatcher,
  TokenVocabulary,
} from './grammar/output-constraint.js';
export { bitmaskAllows, bitmaskWords, constraintKey } from './grammar/output-constraint.js';
export type { VocabularySource } from './grammar/token-vocabulary.js';
export { tokenVocabulary } from './grammar/token-vocabulary.js';
export type { XGrammarCompilerOptions } from './grammar/xgrammar-compiler.js';
export { XGrammarCompiler } from './grammar/xgrammar-compiler.js';
export type { XGrammarInstance, XGrammarModule } from './grammar/xgrammar-module.js';
export { type CommonJsHost, evaluateXGrammar, loadXGrammar } from './grammar/xgrammar-module.js';
export type {
  BackendChoice,
  BackendName,
  BackendProbe,
  ProbeBackendsOptions,
  WebGpuAdapterProbe,
} from './model/backend-select.js';
export { probeBackends, selectBackend } from './model/backend-select.js';
export type { DeviceLimits, ModelLimits, ModelLimitsOptions } from './model/device-limits.js';
export { modelLimits } from './model/device-limits.js';
export type { GenerateOptions } from './model/generate.js';
export { generate } from './model/generate.js';
export type { LoadModelOptions, Model, ModelDevice } from './model/model.js';
export { loadModel } from './model/model.js';
export type { DevicePlacement, WasmPlacementOptions } from './model/placement.js';
export {
  gpuLayersPlacement,
  openWebGpuAdapter,
  parseDevices,
  resolvePlacement,
  wasmPlacement,
} from './model/placement.js';
export { Rng } from './rng.js';
export type { SampleResult, SamplingParams, TokenLogprob } from './sampling/sampler.js';
export {
  applyLogitBias,
  applyPenalties,
  applyTokenBitmask,
  logprobs,
  Sampler,
  SamplingState,
  sample,
  validateSamplingParams,
} from './sampling/sampler.js';
export type { ChatMessage, ChatTemplateOptions } from './tokenizer/chat-template.js';
export { renderChatTemplate } from './tokenizer/chat-template.js';
export type { DetokenizerOptions, TokenDecoder } from './tokenizer/detokenizer.js';
export { IncrementalDetokenizer } from './tokenizer/detokenizer.js';
export type { TokenizerFiles } from './tokenizer/tokenizer.js';
export { ModelTokenizer } from './tokenizer/tokenizer.js';
export { TokenizerThread } from './tokenizer/tokenizer-thread.js';
