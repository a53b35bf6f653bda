/**
 * `@kvasir/server/spec`: the contract an inference engine implements to be served by
 * `@kvasir/server`, with its error type. It pulls in no HTTP framework, validator or metrics
 * library (only `@kvasir/errors`), so a third-party engine depends on this entry point alone.
 *
 * @example
 * ```ts
 * import { EngineError, type InferenceEngine } from '@kvasir/server/spec';
 *
 * class MyEngine implements InferenceEngine {
 *   // listModels, tokenize, applyChatTemplate, generate, stats, health
 * }
 * ```
 */
export type {
  ChatMessage,
  ChoiceDelta,
  EngineHealth,
  EngineStats,
  FinishReason,
  GenerationEvent,
  GenerationRequest,
  GenerationStream,
  InferenceEngine,
  KvCompressionRequest,
  ModelCard,
  OffloadTierStats,
  PromptEvent,
  PromptTokenLogprob,
  SamplingParams,
  TokenLogprob,
  TopLogprob,
  UsageEvent,
} from './engine.js';
export type { ServerErrorCode } from './errors.js';
export { EngineError } from './errors.js';
