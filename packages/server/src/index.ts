export type { ChoiceEmission, PlacedLogprob } from './choice-output.js';
export { ChoiceOutput } from './choice-output.js';
export type { ErrorAnswer, ErrorMapping, OpenAiErrorBody } from './errors.js';
export { ERROR_TABLE, errorAnswer } from './errors.js';
export { ServerMetrics } from './metrics.js';
export type { ChatBody, CompletionBody } from './schemas.js';
export { chatBodySchema, completionBodySchema, parseBody } from './schemas.js';
export type { KvasirServer, ServerOptions } from './server.js';
export { createServer } from './server.js';
export { handleShutdownSignals } from './shutdown.js';
// The engine contract and its error type, also published alone as `@kvasir/server/spec`.
export * from './spec.js';
export type { StopMatchResult } from './stop-matcher.js';
export { StopStringMatcher } from './stop-matcher.js';
