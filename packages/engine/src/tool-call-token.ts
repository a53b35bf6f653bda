// A tool-call format whose opening text is a control token of the model's vocabulary (Mistral's
// `[TOOL_CALLS]`): the model writes the token, not its text, so the grammar must allow the token
// where the format asks for that text, and the output must show the text for the tool-call
// parser to find, while every other special token stays out of the output.

import { IncrementalDetokenizer, type ModelTokenizer, type TokenDecoder } from '@kvasir/model';
import { type ToolCallFormatName, toolCallSyntax } from '@kvasir/server/spec';
import type { IncrementalDecoder } from './model-runner.js';

/**
 * The control token that opens `format`'s calls, by id, when the vocabulary has one whose
 * content is the format's opening text; an empty map otherwise (the text is spelled in plain
 * tokens, and nothing changes).
 */
export function toolCallControlTokens(
  tokenizer: ModelTokenizer,
  format: ToolCallFormatName | undefined,
): ReadonlyMap<number, string> {
  if (format === undefined) return new Map();
  const text = toolCallSyntax(format).trigger;
  const id = tokenizer.tokenToId(text);
  return id !== undefined && tokenizer.isSpecial(id) ? new Map([[id, text]]) : new Map();
}

/**
 * A streaming decoder that leaves special tokens out of the text, except `shown`, which come
 * out as their text (the text around one is decoded on its own).
 */
export function decoderShowing(
  tokenizer: ModelTokenizer,
  shown: ReadonlyMap<number, string>,
): IncrementalDecoder {
  if (shown.size === 0) return tokenizer.createDetokenizer({ skipSpecialTokens: true });
  const decoder: TokenDecoder = {
    decode(ids, options) {
      let text = '';
      let start = 0;
      for (let i = 0; i <= ids.length; i++) {
        const own = i < ids.length ? shown.get(ids[i]!) : undefined;
        if (i < ids.length && own === undefined) continue;
        text += tokenizer.decode(ids.slice(start, i), options);
        if (own !== undefined) text += own;
        start = i + 1;
      }
      return text;
    },
  };
  return new IncrementalDetokenizer(decoder, { skipSpecialTokens: true });
}
