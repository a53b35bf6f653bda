export type { ErrorAnswer, ErrorMapping, OpenAiErrorBody } from './errors.js';
export { ERROR_TABLE, errorAnswer } from './errors.js';
export { ServerMetrics } from './metrics.js';
export type { KvasirServer, ServerOptions } from './server.js';
export { createServer } from './server.js';
export { handleShutdownSignals } from './shutdown.js';
// The engine contract and its error type, also published alone as `@kvasir/server/spec`.
export * from './spec.js';
