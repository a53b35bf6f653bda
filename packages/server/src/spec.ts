/**
 * `@kvasir/server/spec`: the contract an inference engine implements to be served by
 * `@kvasir/server` (version `v1`), with its error type. It pulls in no HTTP framework,
 * validator or metrics library (only `@kvasir/errors`), so a third-party engine depends on this
 * entry point alone.
 *
 * @example
 * ```ts
 * import { EngineError, type InferenceEngine } from '@kvasir/server/spec';
 *
 * class MyEngine implements InferenceEngine {
 *   readonly specificationVersion = 'v1';
 *   // listModels, tokenize, applyChatTemplate, generate, stats, health
 * }
 * ```
 */

export type {
  EngineHealth,
  EngineStats,
  KvGroupStats,
  OffloadTierStats,
} from './engine-stats.js';
export type { ServerErrorCode } from './errors.js';
export { EngineError } from './errors.js';
export type {
  ChoiceDelta,
  FinishReason,
  GenerationEvent,
  GenerationStream,
  PromptEvent,
  PromptTokenLogprob,
  TokenLogprob,
  TopLogprob,
  UsageEvent,
} from './generation-events.js';
export type {
  ChatMessage,
  ChatTemplateOptions,
  ChatToolCall,
  EngineCapabilities,
  FunctionTool,
  GenerationRequest,
  InferenceEngine,
  InferenceEngineMethods,
  KvCompressionRequest,
  ModelCard,
  OutputConstraint,
  OutputConstraintKind,
  SamplingParams,
  StructuralFormat,
  StructuralTagFormat,
  ToolCallFormatName,
} from './inference-engine.js';
export {
  defineInferenceEngine,
  INFERENCE_ENGINE_SPECIFICATION_VERSION,
  validateInferenceEngine,
} from './inference-engine.js';
export type { ToolCallSyntax } from './tools/tool-call-format.js';
export { detectToolCallFormat, toolCallSyntax } from './tools/tool-call-format.js';
