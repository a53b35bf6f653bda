export type { KvBlockState, KvSnapshot, KvSnapshotRequest } from '@kvasir/engine';
export { blockState } from '@kvasir/engine';
export type { BackendReport, PageCapabilities, WebBackendChoice } from './backend-choice.js';
export { chooseWebBackend } from './backend-choice.js';
export type {
  ChatCompletion,
  ChatCompletionChunk,
  ChatCompletionChunkToolCall,
  ChatCompletionMessageToolCall,
  ChatCompletionRequest,
  ChatFinishReason,
  Completion,
  CompletionChunk,
  CompletionRequest,
  CreateEngineOptions,
  RequestOptions,
  Usage,
} from './create-engine.js';
export { createEngine, WebEngine } from './create-engine.js';
export type { WebEngineErrorCode } from './errors.js';
export { WebEngineError } from './errors.js';
export type {
  ChatCompletionMessage,
  SamplingFields,
  ToolRequestFields,
} from './openai-request.js';
export type { KvTierReport } from './opfs-option.js';
export { DEFAULT_OPFS_BYTES } from './opfs-option.js';
export type { ModelInfo, WebEngineStats, WebKvSnapshot } from './protocol.js';
