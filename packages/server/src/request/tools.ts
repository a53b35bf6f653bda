// OpenAI's `tools`, `tool_choice` and `parallel_tool_calls`: the tools a chat template lists, the
// constraint that keeps the model's calls valid, and how the response reads them back.
import { EngineError } from '../errors.js';
import type { FunctionTool, ModelCard, OutputConstraint } from '../inference-engine.js';
import {
  type ToolCallSyntax,
  type ToolChoice,
  toolCallStructure,
  toolCallSyntax,
} from '../tools/tool-call-format.js';

/** What a chat body's tool fields become. */
export interface PreparedTools {
  /** For the chat template; undefined without tools. */
  readonly tools: readonly FunctionTool[] | undefined;
  /** Keeps the output to valid calls; undefined when no call can be made. */
  readonly constraint: OutputConstraint | undefined;
  /** How the response reads calls back; undefined when no call can be made. */
  readonly syntax: ToolCallSyntax | undefined;
}

/** A chat body's tool fields, as OpenAI's (checked for their shape by the caller). */
export interface ToolFields {
  readonly tools?:
    | readonly {
        readonly type: 'function';
        readonly function: {
          readonly name: string;
          readonly description?: string | null;
          /** A JSON Schema of the arguments object; absent means any object. */
          readonly parameters?: Readonly<Record<string, unknown>> | null;
          readonly strict?: boolean | null;
        };
      }[]
    | null;
  /** Default `auto`. */
  readonly tool_choice?:
    | 'none'
    | 'auto'
    | 'required'
    | { readonly type: 'function'; readonly function: { readonly name: string } }
    | null;
  /** Default true. */
  readonly parallel_tool_calls?: boolean | null;
}

const NO_TOOLS: PreparedTools = { tools: undefined, constraint: undefined, syntax: undefined };

const invalid = (param: string, message: string) =>
  new EngineError('INVALID_REQUEST', `${param}: ${message}`, { details: { param } });

/**
 * Checks a chat body's tool fields against each other and the model.
 * @throws EngineError `INVALID_REQUEST` naming the field: a `tool_choice` without tools or
 *   naming an undeclared tool, two tools of one name, tools for a model whose chat template has
 *   no tool-call format.
 */
export function prepareTools(
  body: ToolFields,
  model: Pick<ModelCard, 'id' | 'toolCallFormat'>,
): PreparedTools {
  const declared = body.tools ?? [];
  const choice = body.tool_choice ?? 'auto';
  if (declared.length === 0) {
    if (choice !== 'auto' && choice !== 'none') {
      throw invalid('tool_choice', 'needs tools to choose from');
    }
    return NO_TOOLS;
  }
  const tools: FunctionTool[] = [];
  const names = new Set<string>();
  for (const [i, t] of declared.entries()) {
    const { name, description, parameters, strict } = t.function;
    if (names.has(name)) {
      throw invalid(`tools[${i}].function.name`, `'${name}' is declared twice`);
    }
    names.add(name);
    tools.push({
      type: 'function',
      function: {
        name,
        ...(description == null ? {} : { description }),
        ...(parameters == null ? {} : { parameters }),
        ...(strict == null ? {} : { strict }),
      },
    });
  }
  let mode: ToolChoice['mode'];
  if (typeof choice === 'object') {
    const name = choice.function.name;
    if (!names.has(name)) {
      throw invalid('tool_choice', `unknown tool '${name}' (declared: ${[...names].join(', ')})`);
    }
    mode = { name };
  } else if (choice === 'none') {
    return { tools, constraint: undefined, syntax: undefined };
  } else {
    mode = choice;
  }
  if (model.toolCallFormat === undefined) {
    throw invalid(
      'tools',
      `model '${model.id}' cannot call tools: its chat template has no tool-call format`,
    );
  }
  const syntax = toolCallSyntax(model.toolCallFormat);
  const format = toolCallStructure(syntax, tools, {
    mode,
    parallel: body.parallel_tool_calls ?? true,
  });
  return {
    tools,
    constraint: { kind: 'structural_tag', format, param: 'tools' },
    syntax,
  };
}
