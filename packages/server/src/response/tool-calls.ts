import type { FinishReason } from '../generation-events.js';
import type { ChatToolCall } from '../inference-engine.js';
import { type ToolCallSyntax, toolCallId } from '../tools/tool-call-format.js';
import { type ToolCallDelta, ToolCallParser } from '../tools/tool-call-parser.js';

/** A uniform integer in [0, n) from the Web Crypto API (Node 20 and browsers alike). */
function randomBelow(n: number): number {
  // Values past the last whole multiple of n are drawn again, so every residue is as likely.
  const limit = 2 ** 32 - (2 ** 32 % n);
  const word = new Uint32Array(1);
  for (;;) {
    globalThis.crypto.getRandomValues(word);
    if (word[0]! < limit) return word[0]! % n;
  }
}

/** A parser of one choice's tool calls, with fresh call ids. */
export function toolCallParser(syntax: ToolCallSyntax): ToolCallParser {
  return new ToolCallParser(syntax, () => toolCallId(syntax, randomBelow));
}

/** OpenAI's `message.tool_calls` of a whole response. */
export function toolCallsJson(calls: readonly ChatToolCall[]) {
  return calls.map((c) => ({
    id: c.id,
    type: 'function' as const,
    function: { name: c.name, arguments: c.arguments },
  }));
}

/** OpenAI's `delta.tool_calls[i]`: a call's first delta has its id, type and name. */
export type ToolCallDeltaJson =
  | { readonly index: number; readonly function: { readonly arguments: string } }
  | {
      readonly index: number;
      readonly id: string;
      readonly type: 'function';
      readonly function: { readonly name: string; readonly arguments: string };
    };

/** OpenAI's `delta.tool_calls` of a stream chunk. */
export function toolCallDeltasJson(deltas: readonly ToolCallDelta[]): ToolCallDeltaJson[] {
  return deltas.map((d) =>
    d.id === undefined
      ? { index: d.index, function: { arguments: d.arguments } }
      : {
          index: d.index,
          id: d.id,
          type: 'function' as const,
          // A call's first delta carries its name with its id.
          function: { name: d.name ?? '', arguments: d.arguments },
        },
  );
}

/** A choice that ended normally after calling tools ends with `tool_calls`, as OpenAI's do. */
export function toolFinishReason(reason: FinishReason, calls: number): FinishReason | 'tool_calls' {
  return reason === 'stop' && calls > 0 ? 'tool_calls' : reason;
}

/**
 * A whole choice's text read for tool calls: OpenAI's `message.content` (null when calls alone
 * were made), `message.tool_calls` when there are any, and the choice's finish reason.
 */
export function toolCallMessage(syntax: ToolCallSyntax, text: string, reason: FinishReason) {
  const parser = toolCallParser(syntax);
  const content = parser.push(text).content + parser.finish().content;
  const calls = parser.calls;
  return {
    content: calls.length > 0 && content === '' ? null : content,
    ...(calls.length > 0 ? { tool_calls: toolCallsJson(calls) } : {}),
    finish_reason: toolFinishReason(reason, calls.length),
  };
}

/** One chunk's choice fields of a streamed choice read for tool calls. */
export interface ToolCallChunkChoice {
  readonly delta: { readonly content?: string; readonly tool_calls?: ToolCallDeltaJson[] };
  readonly finish_reason: FinishReason | 'tool_calls' | null;
}

/**
 * The chunks a streamed piece of a choice's text becomes with tool calls: its content, then its
 * call deltas, each in a chunk of its own; when the choice ends (`reason`), what the parser held
 * back and a last empty delta with the finish reason. `keepContent`: send a content delta even
 * when empty and no call moved (it carries the piece's log-probabilities).
 */
export function toolCallChunks(
  parser: ToolCallParser,
  text: string,
  reason: FinishReason | undefined,
  keepContent = false,
): ToolCallChunkChoice[] {
  const parsed = parser.push(text);
  let content = parsed.content;
  if (reason !== undefined) content += parser.finish().content;
  const deltas: ToolCallChunkChoice['delta'][] = [];
  if (content !== '' || (keepContent && parsed.toolCalls.length === 0)) deltas.push({ content });
  if (parsed.toolCalls.length > 0) {
    deltas.push({ tool_calls: toolCallDeltasJson(parsed.toolCalls) });
  }
  if (reason !== undefined) deltas.push({});
  return deltas.map((delta, k) => ({
    delta,
    finish_reason:
      reason !== undefined && k === deltas.length - 1
        ? toolFinishReason(reason, parser.calls.length)
        : null,
  }));
}
