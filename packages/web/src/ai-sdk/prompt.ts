// The AI SDK's prompt (LanguageModelV3Prompt) as the OpenAI chat messages the engine takes.
import {
  type LanguageModelV3Prompt,
  type LanguageModelV3ToolResultOutput,
  type SharedV3Warning,
  UnsupportedFunctionalityError,
} from '@ai-sdk/provider';
import type { ChatCompletionMessage } from '../openai-request.js';

type ToolCalls = NonNullable<ChatCompletionMessage['tool_calls']>;

/** A tool result as a tool message's text (as OpenAI-compatible providers send it). */
function toolResultText(output: LanguageModelV3ToolResultOutput): string {
  switch (output.type) {
    case 'text':
    case 'error-text':
      return output.value;
    case 'execution-denied':
      return output.reason ?? 'Tool execution denied.';
    default:
      return JSON.stringify(output.value);
  }
}

/**
 * Chat messages of `prompt`: system text as is, user and assistant text parts joined, an
 * assistant's tool calls as its `tool_calls` (input as JSON text), each tool result as a
 * `role: 'tool'` message answering its call. Reasoning parts of earlier turns are left out
 * (with a warning): the template has no place for them.
 * @throws UnsupportedFunctionalityError for file parts (the in-page engine takes text only) and
 *   results of provider-executed tools.
 */
export function chatMessages(
  prompt: LanguageModelV3Prompt,
  warnings: SharedV3Warning[],
): ChatCompletionMessage[] {
  const messages: ChatCompletionMessage[] = [];
  let droppedReasoning = false;
  for (const message of prompt) {
    if (message.role === 'system') {
      messages.push({ role: 'system', content: message.content });
      continue;
    }
    if (message.role === 'tool') {
      for (const part of message.content) {
        // Approval answers are the AI SDK's own bookkeeping: the model never sees them.
        if (part.type !== 'tool-result') continue;
        messages.push({
          role: 'tool',
          tool_call_id: part.toolCallId,
          content: toolResultText(part.output),
        });
      }
      continue;
    }
    let content = '';
    const toolCalls: ToolCalls[number][] = [];
    for (const part of message.content) {
      if (part.type === 'text') content += part.text;
      else if (part.type === 'reasoning') droppedReasoning = true;
      else if (part.type === 'tool-call') {
        toolCalls.push({
          id: part.toolCallId,
          type: 'function',
          function: { name: part.toolName, arguments: JSON.stringify(part.input) },
        });
      } else if (part.type === 'file') {
        throw new UnsupportedFunctionalityError({
          functionality: `file parts (${part.mediaType}): the in-page engine reads text only`,
        });
      } else {
        throw new UnsupportedFunctionalityError({
          functionality: `${part.type} parts in the prompt (provider-executed tools)`,
        });
      }
    }
    messages.push(
      toolCalls.length > 0
        ? { role: 'assistant', content: content === '' ? null : content, tool_calls: toolCalls }
        : { role: message.role, content },
    );
  }
  if (droppedReasoning) {
    warnings.push({
      type: 'other',
      message: 'reasoning parts of earlier assistant turns were left out of the prompt',
    });
  }
  return messages;
}
