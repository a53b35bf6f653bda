import type { ChatToolCall } from '../inference-engine.js';
import type { ToolCallSyntax } from './tool-call-format.js';

/** What one piece of a choice's text adds to a tool call (OpenAI's `delta.tool_calls[i]`). */
export interface ToolCallDelta {
  /** The call's place among the choice's calls. */
  readonly index: number;
  /** Set on the call's first delta, with {@link name}. */
  readonly id?: string;
  readonly name?: string;
  /** Arguments text this piece adds (possibly empty). */
  readonly arguments: string;
}

/** A piece of a choice's output, split into plain content and tool-call deltas. */
export interface ParsedOutput {
  readonly content: string;
  readonly toolCalls: readonly ToolCallDelta[];
}

type State = 'text' | 'literal' | 'name' | 'arguments' | 'next';

/**
 * Reads tool calls out of a choice's text as it streams, in one family's syntax: text outside
 * calls is content; a call's name is sent once whole, its arguments as they come. Text that
 * could still begin a call is held back until it does or cannot. Whitespace alone between or
 * around calls is not content. The result does not depend on how the text was split. A call
 * cut short (by `max_tokens`) keeps what was read.
 */
export class ToolCallParser {
  readonly #syntax: ToolCallSyntax;
  readonly #newId: () => string;
  readonly #calls: { id: string; name: string; arguments: string }[] = [];
  #buffer = '';
  #state: State = 'text';
  /** In `literal`: the text expected next, and the state after it. */
  #literal = '';
  #after: State = 'text';
  /** Whether the literal being matched opens a region (a mismatch there is plain text). */
  #opening = false;
  /** Whitespace not yet known to be content (it may only separate calls). */
  #heldWhitespace = '';
  /** Whether the text since the last call (or the start) had more than whitespace. */
  #runHasText = false;
  #depth = 0;
  #inString = false;
  #escaped = false;

  constructor(syntax: ToolCallSyntax, newId: () => string) {
    this.#syntax = syntax;
    this.#newId = newId;
  }

  /** The calls read so far, arguments as far as they came. */
  get calls(): readonly ChatToolCall[] {
    return this.#calls;
  }

  /** Reads more of the choice's text. */
  push(text: string): ParsedOutput {
    this.#buffer += text;
    const out = { content: '', toolCalls: [] as ToolCallDelta[] };
    while (this.#step(out)) {}
    return { content: out.content, toolCalls: mergeDeltas(out.toolCalls) };
  }

  /** The end of the choice's text: what was held back. */
  finish(): ParsedOutput {
    const out = { content: '' };
    if (this.#state === 'text' || (this.#state === 'literal' && this.#opening)) {
      this.#text(out, this.#buffer);
    }
    this.#buffer = '';
    this.#state = 'text';
    // A reply of whitespace alone is still the reply.
    if (this.#calls.length === 0) out.content += this.#heldWhitespace;
    this.#heldWhitespace = '';
    return { content: out.content, toolCalls: [] };
  }

  /** One move of the state machine; false when it needs more text. */
  #step(out: { content: string; toolCalls: ToolCallDelta[] }): boolean {
    const s = this.#syntax;
    switch (this.#state) {
      case 'text': {
        const at = this.#buffer.indexOf(s.trigger);
        if (at < 0) {
          const keep = heldPrefix(this.#buffer, s.trigger);
          this.#text(out, this.#buffer.slice(0, this.#buffer.length - keep));
          this.#buffer = this.#buffer.slice(this.#buffer.length - keep);
          return false;
        }
        this.#text(out, this.#buffer.slice(0, at));
        this.#buffer = this.#buffer.slice(at);
        this.#expect(s.regionOpen + s.callOpen, 'name', true);
        return true;
      }
      case 'literal': {
        const literal = this.#literal;
        if (this.#buffer.startsWith(literal)) {
          this.#buffer = this.#buffer.slice(literal.length);
          this.#state = this.#after;
          return true;
        }
        if (literal.startsWith(this.#buffer)) return false;
        this.#mismatch(out);
        return true;
      }
      case 'name': {
        const end = this.#buffer.indexOf('"');
        if (end < 0) return false;
        const name = this.#buffer.slice(0, end);
        this.#buffer = this.#buffer.slice(end);
        // Whitespace alone between calls is no content.
        this.#heldWhitespace = '';
        this.#runHasText = false;
        const call = { id: this.#newId(), name, arguments: '' };
        this.#calls.push(call);
        out.toolCalls.push({ index: this.#calls.length - 1, id: call.id, name, arguments: '' });
        this.#depth = 0;
        this.#inString = false;
        this.#escaped = false;
        this.#expect(s.afterName, 'arguments', false);
        return true;
      }
      case 'arguments': {
        const end = this.#argumentsEnd();
        const piece = this.#buffer.slice(0, end < 0 ? this.#buffer.length : end);
        this.#buffer = this.#buffer.slice(piece.length);
        const index = this.#calls.length - 1;
        this.#calls[index]!.arguments += piece;
        if (piece !== '') out.toolCalls.push({ index, arguments: piece });
        if (end < 0) return false;
        this.#expect(s.close, s.callSeparator === null ? 'text' : 'next', false);
        return true;
      }
      case 'next': {
        const next = `${s.callSeparator}${s.callOpen}`;
        if (this.#buffer.startsWith(next)) {
          this.#buffer = this.#buffer.slice(next.length);
          this.#state = 'name';
          return true;
        }
        if (this.#buffer.startsWith(s.regionClose)) {
          this.#buffer = this.#buffer.slice(s.regionClose.length);
          this.#state = 'text';
          return true;
        }
        if (next.startsWith(this.#buffer) || s.regionClose.startsWith(this.#buffer)) return false;
        this.#mismatch(out);
        return true;
      }
    }
  }

  #expect(literal: string, after: State, opening: boolean): void {
    this.#state = 'literal';
    this.#literal = literal;
    this.#after = after;
    this.#opening = opening;
  }

  /** The text left the syntax: a region that never opened is content, else the rest is. */
  #mismatch(out: { content: string }): void {
    if (this.#state === 'literal' && this.#opening) {
      // Only the trigger's first character is known not to start a call.
      this.#text(out, this.#buffer.slice(0, 1));
      this.#buffer = this.#buffer.slice(1);
    }
    this.#state = 'text';
  }

  /** Where the arguments object ends in the buffer (just past its closing brace), or -1. */
  #argumentsEnd(): number {
    const b = this.#buffer;
    for (let i = 0; i < b.length; i++) {
      const c = b[i];
      if (this.#inString) {
        if (this.#escaped) this.#escaped = false;
        else if (c === '\\') this.#escaped = true;
        else if (c === '"') this.#inString = false;
      } else if (c === '"') this.#inString = true;
      else if (c === '{' || c === '[') this.#depth++;
      else if (c === '}' || c === ']') {
        this.#depth--;
        if (this.#depth === 0) return i + 1;
      }
    }
    return -1;
  }

  /**
   * Text outside calls. Whitespace waits until the text around it shows it is content, so the
   * split into content and calls does not depend on how the text was streamed.
   */
  #text(out: { content: string }, piece: string): void {
    if (piece === '') return;
    if (this.#runHasText) {
      out.content += piece;
    } else if (piece.trim() === '') {
      this.#heldWhitespace += piece;
    } else {
      out.content += this.#heldWhitespace + piece;
      this.#heldWhitespace = '';
      this.#runHasText = true;
    }
  }
}

/** Length of the longest end of `text` that begins `marker` (it may still become one). */
function heldPrefix(text: string, marker: string): number {
  for (let k = Math.min(text.length, marker.length - 1); k > 0; k--) {
    if (marker.startsWith(text.slice(text.length - k))) return k;
  }
  return 0;
}

/** Consecutive deltas of one call in one piece become one. */
function mergeDeltas(deltas: readonly ToolCallDelta[]): ToolCallDelta[] {
  const out: ToolCallDelta[] = [];
  for (const d of deltas) {
    const last = out[out.length - 1];
    if (last && last.index === d.index) {
      out[out.length - 1] = { ...last, arguments: last.arguments + d.arguments };
    } else {
      out.push(d);
    }
  }
  return out;
}
