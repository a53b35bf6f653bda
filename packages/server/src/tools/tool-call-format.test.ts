import { describe, expect, it } from 'vitest';
import type { FunctionTool } from '../inference-engine.js';
import {
  detectToolCallFormat,
  toolCallId,
  toolCallStructure,
  toolCallSyntax,
} from './tool-call-format.js';

const tools: FunctionTool[] = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      parameters: { type: 'object', properties: { city: { type: 'string' } } },
    },
  },
  { type: 'function', function: { name: 'now' } },
];

describe('tool-call formats', () => {
  it('recognizes the family from the chat template', () => {
    expect(detectToolCallFormat('{{- "<tool_call>\\n" }}')).toBe('hermes');
    expect(detectToolCallFormat('{{- "[TOOL_CALLS][" }}')).toBe('mistral');
    expect(detectToolCallFormat(`{%- if 'tool_calls' in message %}{{- '"parameters": ' }}`)).toBe(
      'llama3_json',
    );
    expect(detectToolCallFormat('{{ bos_token }}{{ message.content }}')).toBeUndefined();
  });

  it('forces calls of declared tools, one unless parallel', () => {
    const hermes = toolCallSyntax('hermes');
    expect(toolCallStructure(hermes, tools, { mode: 'required', parallel: false })).toEqual({
      type: 'tags_with_separator',
      tags: [
        {
          type: 'tag',
          begin: '<tool_call>\n{"name": "get_weather", "arguments": ',
          content: { type: 'json_schema', json_schema: tools[0]!.function.parameters },
          end: '}\n</tool_call>',
        },
        {
          type: 'tag',
          begin: '<tool_call>\n{"name": "now", "arguments": ',
          content: { type: 'json_schema', json_schema: { type: 'object' } },
          end: '}\n</tool_call>',
        },
      ],
      separator: '\n',
      at_least_one: true,
      stop_after_first: true,
    });
    const named = toolCallStructure(hermes, tools, { mode: { name: 'now' }, parallel: true });
    expect(named).toMatchObject({ type: 'tags_with_separator', stop_after_first: false });
    expect((named as unknown as { tags: unknown[] }).tags).toHaveLength(1);
    // One call of one tool: the tag alone.
    expect(
      toolCallStructure(toolCallSyntax('llama3_json'), tools, {
        mode: { name: 'now' },
        parallel: false,
      }),
    ).toMatchObject({ type: 'tag', begin: '{"name": "now", "parameters": ', end: '}' });
    // Never an empty separator (XGrammar refuses one).
    expect(
      toolCallStructure(toolCallSyntax('llama3_json'), tools, { mode: 'required', parallel: true }),
    ).toMatchObject({ type: 'tags_with_separator', separator: '\n', stop_after_first: true });
  });

  it('lets auto write text, a call constrained from its trigger', () => {
    const s = toolCallStructure(toolCallSyntax('llama3_json'), tools, {
      mode: 'auto',
      parallel: true,
    });
    // Llama 3.1 makes one call per turn whatever the request says.
    expect(s).toMatchObject({
      type: 'triggered_tags',
      triggers: ['{"name": "'],
      stop_after_first: true,
    });
  });

  it('puts Mistral calls in one [TOOL_CALLS] list', () => {
    const s = toolCallStructure(toolCallSyntax('mistral'), tools, { mode: 'auto', parallel: true });
    expect(s).toMatchObject({
      type: 'triggered_tags',
      triggers: ['[TOOL_CALLS]'],
      tags: [
        {
          type: 'tag',
          begin: '[TOOL_CALLS][',
          end: ']',
          content: { type: 'tags_with_separator', separator: ', ', stop_after_first: false },
        },
      ],
    });
  });

  it("makes ids as OpenAI's, or of the length a template demands", () => {
    let i = 0;
    const random = (n: number) => i++ % n;
    expect(toolCallId(toolCallSyntax('hermes'), random)).toMatch(/^call_[A-Za-z0-9]{24}$/);
    expect(toolCallId(toolCallSyntax('mistral'), random)).toMatch(/^[A-Za-z0-9]{9}$/);
  });
});
