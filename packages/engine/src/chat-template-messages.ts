import type { ChatMessage } from '@kvasir/server/spec';

/** A chat message as Hugging Face chat templates read it (transformers' message dicts). */
export interface TemplateMessage {
  readonly role: string;
  readonly content: string;
  readonly [field: string]: unknown;
}

/**
 * A chat message in the shape chat templates expect: `tool_calls` as OpenAI's objects with
 * the arguments parsed (templates write them with `| tojson`, which would quote a JSON string,
 * as vLLM parses them too) and `tool_call_id` on tool results.
 */
export function templateMessage(m: ChatMessage): TemplateMessage {
  return {
    role: m.role,
    content: m.content,
    ...(m.name === undefined ? {} : { name: m.name }),
    ...(m.toolCalls
      ? {
          tool_calls: m.toolCalls.map((c) => ({
            id: c.id,
            type: 'function',
            function: { name: c.name, arguments: parsedArguments(c.arguments) },
          })),
        }
      : {}),
    ...(m.toolCallId === undefined ? {} : { tool_call_id: m.toolCallId }),
  };
}

function parsedArguments(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    // Not JSON (a client's own text): the template gets it as it came.
    return text;
  }
}
