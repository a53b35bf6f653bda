// The AI SDK's prompt (LanguageModelV3Prompt) as the chat messages the engine's template takes.
import {
  type LanguageModelV3Prompt,
  type SharedV3Warning,
  UnsupportedFunctionalityError,
} from '@ai-sdk/provider';
import type { ChatMessage } from '@kvasir/server/spec';

/**
 * Chat messages of `prompt`: system text as is, user and assistant text parts joined. Reasoning
 * parts of earlier turns are left out (with a warning): the template has no place for them.
 * @throws UnsupportedFunctionalityError for file parts, tool calls and tool results (the
 *   in-page engine takes text only and its request carries no tools).
 */
export function chatMessages(
  prompt: LanguageModelV3Prompt,
  warnings: SharedV3Warning[],
): ChatMessage[] {
  const messages: ChatMessage[] = [];
  let droppedReasoning = false;
  for (const message of prompt) {
    if (message.role === 'system') {
      messages.push({ role: 'system', content: message.content });
      continue;
    }
    if (message.role === 'tool') {
      throw new UnsupportedFunctionalityError({ functionality: 'tool results in the prompt' });
    }
    let content = '';
    for (const part of message.content) {
      if (part.type === 'text') content += part.text;
      else if (part.type === 'reasoning') droppedReasoning = true;
      else if (part.type === 'file') {
        throw new UnsupportedFunctionalityError({
          functionality: `file parts (${part.mediaType}): the in-page engine reads text only`,
        });
      } else {
        throw new UnsupportedFunctionalityError({
          functionality: `${part.type} parts in the prompt`,
        });
      }
    }
    messages.push({ role: message.role, content });
  }
  if (droppedReasoning) {
    warnings.push({
      type: 'other',
      message: 'reasoning parts of earlier assistant turns were left out of the prompt',
    });
  }
  return messages;
}
