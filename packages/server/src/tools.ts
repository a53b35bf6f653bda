/**
 * `@kvasir/server/tools`: OpenAI's tool calling without the HTTP server, for any runtime with
 * Web Crypto (Node 20, browsers, workers): a chat body's messages and tool fields checked and
 * turned into the chat template's input and the engine's output constraint, and a choice's text
 * read back as OpenAI's `tool_calls`, whole or streamed. `@kvasir/server` uses these itself;
 * `@kvasir/web` runs the same in the page. Reaches nothing but `@kvasir/errors` at run time.
 *
 * @example
 * ```ts
 * import { chatMessages, prepareTools, toolCallMessage } from '@kvasir/server/tools';
 *
 * const prepared = prepareTools(body, engine.modelCard); // throws EngineError INVALID_REQUEST
 * const prompt = await engine.applyChatTemplate(model, chatMessages(body.messages), {
 *   tools: prepared.tools,
 * });
 * // ... generate with `constraint: prepared.constraint`, then:
 * const { content, tool_calls, finish_reason } = toolCallMessage(prepared.syntax!, text, 'stop');
 * ```
 */

export type { OpenAIChatMessage } from './request/chat-messages.js';
export { chatMessages } from './request/chat-messages.js';
export type { PreparedTools, ToolFields } from './request/tools.js';
export { prepareTools } from './request/tools.js';
export type { ToolCallChunkChoice, ToolCallDeltaJson } from './response/tool-calls.js';
export {
  toolCallChunks,
  toolCallDeltasJson,
  toolCallMessage,
  toolCallParser,
  toolCallsJson,
  toolFinishReason,
} from './response/tool-calls.js';
export type { ToolCallSyntax } from './tools/tool-call-format.js';
export { detectToolCallFormat, toolCallSyntax } from './tools/tool-call-format.js';
export type { ParsedOutput, ToolCallDelta } from './tools/tool-call-parser.js';
export { ToolCallParser } from './tools/tool-call-parser.js';
