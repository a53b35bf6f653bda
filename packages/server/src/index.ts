export type { ChoiceEmission, PlacedLogprob } from './choice-output.js';
export { ChoiceOutput } from './choice-output.js';
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
  ModelCard,
  OffloadTierStats,
  SamplingParams,
  TokenLogprob,
  TopLogprob,
  UsageEvent,
} from './engine.js';
export type { ErrorAnswer, ErrorMapping, OpenAiErrorBody, ServerErrorCode } from './errors.js';
export { EngineError, ERROR_TABLE, errorAnswer } from './errors.js';
export { ServerMetrics } from './metrics.js';
export type { ChatBody, CompletionBody } from './schemas.js';
export { chatBodySchema, completionBodySchema, parseBody } from './schemas.js';
export type { KvasirServer, ServerOptions } from './server.js';
export { createServer } from './server.js';
export { handleShutdownSignals } from './shutdown.js';
export type { StopMatchResult } from './stop-matcher.js';
export { StopStringMatcher } from './stop-matcher.js';
