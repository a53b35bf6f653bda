// OpenAI's chat messages as the chat template takes them: text parts joined, an assistant's
// `tool_calls` and a tool message's `tool_call_id` kept for templates that render them.
import type { ChatMessage } from '../inference-engine.js';

/** One message of an OpenAI chat body, as a client sends it. */
export interface OpenAIChatMessage {
  readonly role: ChatMessage['role'];
  /** Text, text parts, or null (an assistant message that only calls tools). */
  readonly content?: string | readonly { readonly text: string }[] | null;
  readonly name?: string;
  /** An assistant message's calls, as its response gave them. */
  readonly tool_calls?:
    | readonly {
        readonly id: string;
        readonly type?: 'function';
        readonly function: { readonly name: string; readonly arguments: string };
      }[]
    | null;
  /** A `tool` message: the call it answers. */
  readonly tool_call_id?: string | null;
}

/** The chat template's messages of an OpenAI body's `messages`. */
export function chatMessages(messages: readonly OpenAIChatMessage[]): ChatMessage[] {
  return messages.map((m) => ({
    role: m.role,
    content:
      typeof m.content === 'string'
        ? m.content
        : (m.content ?? []).map((part) => part.text).join(''),
    ...(m.name === undefined ? {} : { name: m.name }),
    ...(m.tool_calls
      ? {
          toolCalls: m.tool_calls.map((c) => ({
            id: c.id,
            name: c.function.name,
            arguments: c.function.arguments,
          })),
        }
      : {}),
    ...(m.tool_call_id == null ? {} : { toolCallId: m.tool_call_id }),
  }));
}
