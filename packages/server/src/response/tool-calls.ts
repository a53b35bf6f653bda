import { randomInt } from 'node:crypto';
import type { FinishReason } from '../generation-events.js';
import type { ChatToolCall } from '../inference-engine.js';
import { type ToolCallSyntax, toolCallId } from '../tools/tool-call-format.js';
import { type ToolCallDelta, ToolCallParser } from '../tools/tool-call-parser.js';

/** A parser of one choice's tool calls, with fresh call ids. */
export function toolCallParser(syntax: ToolCallSyntax): ToolCallParser {
  return new ToolCallParser(syntax, () => toolCallId(syntax, randomInt));
}

/** OpenAI's `message.tool_calls` of a whole response. */
export function toolCallsJson(calls: readonly ChatToolCall[]) {
  return calls.map((c) => ({
    id: c.id,
    type: 'function' as const,
    function: { name: c.name, arguments: c.arguments },
  }));
}

/** OpenAI's `delta.tool_calls` of a stream chunk. */
export function toolCallDeltasJson(deltas: readonly ToolCallDelta[]) {
  return deltas.map((d) =>
    d.id === undefined
      ? { index: d.index, function: { arguments: d.arguments } }
      : {
          index: d.index,
          id: d.id,
          type: 'function' as const,
          function: { name: d.name, arguments: d.arguments },
        },
  );
}

/** A choice that ended normally after calling tools ends with `tool_calls`, as OpenAI's do. */
export function toolFinishReason(reason: FinishReason, calls: number): FinishReason | 'tool_calls' {
  return reason === 'stop' && calls > 0 ? 'tool_calls' : reason;
}
