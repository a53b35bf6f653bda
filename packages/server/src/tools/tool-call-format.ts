// How each model family writes tool calls, as its chat template tells the model to (and renders
// past calls): the literal text around a call's name and arguments. One description serves the
// grammar that constrains a call and the parser that reads it back.
import type {
  FunctionTool,
  StructuralFormat,
  StructuralTagFormat,
  ToolCallFormatName,
} from '../inference-engine.js';

/**
 * The text of a family's tool calls. A call is `callOpen + name + afterName + arguments +
 * close` (the arguments are one JSON object); a region of calls is `regionOpen`, then calls
 * separated by `callSeparator`, then `regionClose`; regions are separated by `regionSeparator`.
 */
export interface ToolCallSyntax {
  readonly name: ToolCallFormatName;
  /** What starts a region of calls in free text (the trigger with `tool_choice: auto`). */
  readonly trigger: string;
  readonly regionOpen: string;
  readonly callOpen: string;
  readonly afterName: string;
  /** After the arguments object. */
  readonly close: string;
  /** Between two calls of one region; null when a region holds one call. */
  readonly callSeparator: string | null;
  readonly regionClose: string;
  /** Between two regions, when each call is its own region. */
  readonly regionSeparator: string;
  /** Whether the family calls several tools in one turn at all. */
  readonly parallel: boolean;
  /** Length of the alphanumeric call ids its template accepts; undefined: OpenAI's `call_…`. */
  readonly idLength?: number;
}

const SYNTAX: Readonly<Record<ToolCallFormatName, ToolCallSyntax>> = {
  hermes: {
    name: 'hermes',
    trigger: '<tool_call>',
    regionOpen: '',
    callOpen: '<tool_call>\n{"name": "',
    afterName: '", "arguments": ',
    close: '}\n</tool_call>',
    callSeparator: null,
    regionClose: '',
    regionSeparator: '\n',
    parallel: true,
  },
  // The Llama 3.1 template renders one call per assistant turn ("This model only supports
  // single tool-calls at once!").
  llama3_json: {
    name: 'llama3_json',
    trigger: '{"name": "',
    regionOpen: '',
    callOpen: '{"name": "',
    afterName: '", "parameters": ',
    close: '}',
    callSeparator: null,
    regionClose: '',
    regionSeparator: '',
    parallel: false,
  },
  // Mistral's template refuses call ids that are not 9 alphanumerics.
  mistral: {
    name: 'mistral',
    trigger: '[TOOL_CALLS]',
    regionOpen: '[TOOL_CALLS][',
    callOpen: '{"name": "',
    afterName: '", "arguments": ',
    close: '}',
    callSeparator: ', ',
    regionClose: ']',
    regionSeparator: '',
    parallel: true,
    idLength: 9,
  },
};

/** The syntax of a tool-call format. */
export function toolCallSyntax(format: ToolCallFormatName): ToolCallSyntax {
  return SYNTAX[format];
}

/**
 * The tool-call format a chat template teaches its model, from the text the template writes
 * for calls; undefined when it has none (the model cannot be given tools).
 *
 * @example
 * ```ts
 * detectToolCallFormat(tokenizer.chatTemplate ?? ''); // 'hermes' for Qwen 2.5
 * ```
 */
export function detectToolCallFormat(template: string): ToolCallFormatName | undefined {
  if (template.includes('<tool_call>')) return 'hermes';
  if (template.includes('[TOOL_CALLS]')) return 'mistral';
  if (template.includes('"parameters": ') && template.includes('tool_call')) return 'llama3_json';
  return undefined;
}

/** What the request asks of tool calls (OpenAI's `tool_choice` and `parallel_tool_calls`). */
export interface ToolChoice {
  /** `auto`: text or calls; `required`: at least one call; a name: a call of that tool. */
  readonly mode: 'auto' | 'required' | { readonly name: string };
  readonly parallel: boolean;
}

function callTag(syntax: ToolCallSyntax, tool: FunctionTool, open: string): StructuralTagFormat {
  return {
    type: 'tag',
    begin: `${open}${tool.function.name}${syntax.afterName}`,
    content: { type: 'json_schema', json_schema: tool.function.parameters ?? { type: 'object' } },
    end: syntax.close,
  };
}

/**
 * The structural tag that keeps a choice's output to valid calls of `tools` in `syntax`, each
 * call's arguments valid against its tool's schema: with `auto` free text in which a call, once
 * its trigger appears, is constrained to its end; otherwise nothing but calls (at least one).
 * A named choice allows that tool only; without `parallel`, one call.
 */
export function toolCallStructure(
  syntax: ToolCallSyntax,
  tools: readonly FunctionTool[],
  choice: ToolChoice,
): StructuralFormat {
  const named = typeof choice.mode === 'object' ? choice.mode.name : undefined;
  const allowed = named === undefined ? tools : tools.filter((t) => t.function.name === named);
  const parallel = choice.parallel && syntax.parallel;
  const auto = choice.mode === 'auto';
  if (syntax.callSeparator === null) {
    // Each call is a region of its own (hermes, llama3_json).
    const tags = allowed.map((t) => callTag(syntax, t, syntax.regionOpen + syntax.callOpen));
    if (auto) {
      return {
        type: 'triggered_tags',
        triggers: [syntax.trigger],
        tags,
        stop_after_first: !parallel,
      };
    }
    if (tags.length === 1 && !parallel) return tags[0]!;
    return {
      type: 'tags_with_separator',
      tags,
      // XGrammar refuses an empty separator; one that is never written does no harm.
      separator: syntax.regionSeparator || '\n',
      at_least_one: true,
      stop_after_first: !parallel,
    };
  }
  // One region holds the calls (mistral).
  const region: StructuralTagFormat = {
    type: 'tag',
    begin: syntax.regionOpen,
    content: {
      type: 'tags_with_separator',
      tags: allowed.map((t) => callTag(syntax, t, syntax.callOpen)),
      separator: syntax.callSeparator,
      at_least_one: true,
      stop_after_first: !parallel,
    },
    end: syntax.regionClose,
  };
  return auto
    ? { type: 'triggered_tags', triggers: [syntax.trigger], tags: [region], stop_after_first: true }
    : region;
}

const ALPHANUMERIC = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';

/** A fresh call id: OpenAI's `call_` and 24 alphanumerics, or the length a template demands. */
export function toolCallId(syntax: ToolCallSyntax, random: (n: number) => number): string {
  const n = syntax.idLength ?? 24;
  let id = '';
  for (let i = 0; i < n; i++) id += ALPHANUMERIC[random(ALPHANUMERIC.length)];
  return syntax.idLength === undefined ? `call_${id}` : id;
}
