import { describe, expect, it } from 'vitest';
import { WebEngineError } from './errors.js';
import { chatInput, generateParams } from './openai-request.js';

describe('generateParams', () => {
  it("fills the server's defaults and maps OpenAI's names", () => {
    expect(generateParams({})).toMatchObject({
      n: 1,
      maxTokens: 256,
      temperature: 1,
      topP: 1,
      topK: 0,
      stop: [],
    });
    expect(
      generateParams({
        max_completion_tokens: 5,
        max_tokens: 9,
        top_k: -1,
        stop: 'END',
        seed: 3,
        logit_bias: { '7': -100 },
      }),
    ).toMatchObject({ maxTokens: 5, topK: 0, stop: ['END'], seed: 3, logitBias: { 7: -100 } });
  });

  it('refuses a wrong field with INVALID_REQUEST naming it', () => {
    const param = (body: Parameters<typeof generateParams>[0]) => {
      try {
        generateParams(body);
        return 'accepted';
      } catch (error) {
        expect(WebEngineError.isInstance(error) && error.code).toBe('INVALID_REQUEST');
        return (error as WebEngineError).details?.param;
      }
    };
    expect(param({ temperature: 3 })).toBe('temperature');
    expect(param({ max_tokens: 0 })).toBe('max_tokens');
    expect(param({ max_completion_tokens: 1.5 })).toBe('max_completion_tokens');
    expect(param({ n: 0 })).toBe('n');
    expect(param({ stop: ['a', 'b', 'c', 'd', 'e'] })).toBe('stop');
    expect(param({ logit_bias: { x: 1 } })).toBe('logit_bias');
    expect(param({ top_p: 0 })).toBe('top_p');
    expect(param({ response_format: { type: 'yaml' } as never })).toBe('response_format');
    expect(param({ response_format: { type: 'json_schema' } as never })).toBe('response_format');
  });

  it("turns response_format into the engine's output constraint", () => {
    const schema = { type: 'object', properties: { ok: { type: 'boolean' } } };
    expect(generateParams({ response_format: { type: 'text' } }).constraint).toBeUndefined();
    expect(generateParams({ response_format: { type: 'json_object' } }).constraint).toEqual({
      kind: 'json_object',
      param: 'response_format',
    });
    expect(
      generateParams({
        response_format: { type: 'json_schema', json_schema: { name: 'x', schema } },
      }).constraint,
    ).toEqual({ kind: 'json_schema', schema, param: 'response_format' });
  });
});

describe('chatInput', () => {
  const hermes = { id: 'tiny', toolCallFormat: 'hermes' } as const;
  const tools = [
    {
      type: 'function' as const,
      function: {
        name: 'get_weather',
        parameters: { type: 'object', properties: { city: { type: 'string' } } },
      },
    },
  ];
  const param = (run: () => unknown) => {
    try {
      run();
      return 'accepted';
    } catch (error) {
      expect(WebEngineError.isInstance(error) && error.code).toBe('INVALID_REQUEST');
      return (error as WebEngineError).details?.param;
    }
  };

  it("takes OpenAI's tool turns into the template's messages", () => {
    const input = chatInput(
      {
        messages: [
          { role: 'user', content: [{ text: 'Weather in ' }, { text: 'Oslo?' }] },
          {
            role: 'assistant',
            content: null,
            tool_calls: [
              {
                id: 'call_1',
                type: 'function',
                function: { name: 'get_weather', arguments: '{}' },
              },
            ],
          },
          { role: 'tool', tool_call_id: 'call_1', content: '{"temp": 21}' },
        ],
        tools,
        tool_choice: 'none',
      },
      hermes,
      undefined,
    );
    expect(input.messages).toEqual([
      { role: 'user', content: 'Weather in Oslo?' },
      {
        role: 'assistant',
        content: '',
        toolCalls: [{ id: 'call_1', name: 'get_weather', arguments: '{}' }],
      },
      { role: 'tool', content: '{"temp": 21}', toolCallId: 'call_1' },
    ]);
    // `none`: the template lists the tools, nothing constrains or reads calls.
    expect(input.tools?.[0]?.function.name).toBe('get_weather');
    expect(input.constraint).toBeUndefined();
    expect(input.toolCalls).toBeUndefined();
  });

  it("constrains the output to calls in the model's syntax", () => {
    const messages = [{ role: 'user' as const, content: 'Weather?' }];
    const required = chatInput({ messages, tools, tool_choice: 'required' }, hermes, undefined);
    expect(required.constraint).toMatchObject({ kind: 'structural_tag', param: 'tools' });
    expect(required.toolCalls?.name).toBe('hermes');
    const named = chatInput(
      { messages, tools, tool_choice: { type: 'function', function: { name: 'get_weather' } } },
      hermes,
      undefined,
    );
    expect(named.constraint).toMatchObject({ kind: 'structural_tag' });
  });

  it('refuses wrong tool fields with INVALID_REQUEST naming them', () => {
    const messages = [{ role: 'user' as const, content: 'Hi' }];
    const named = (name: string) => ({ type: 'function' as const, function: { name } });
    expect(
      param(() => chatInput({ messages, tools, tool_choice: named('launch') }, hermes, undefined)),
    ).toBe('tool_choice');
    expect(param(() => chatInput({ messages, tool_choice: 'required' }, hermes, undefined))).toBe(
      'tool_choice',
    );
    expect(param(() => chatInput({ messages, tools }, { id: 'plain' }, undefined))).toBe('tools');
    expect(
      param(() => chatInput({ messages, tools: [...tools, ...tools] }, hermes, undefined)),
    ).toBe('tools[1].function.name');
    expect(param(() => chatInput({ messages, tools: [named('a b')] }, hermes, undefined))).toBe(
      'tools[0].function.name',
    );
    expect(
      param(() => chatInput({ messages, tools, tool_choice: 'any' as never }, hermes, undefined)),
    ).toBe('tool_choice');
    expect(
      param(() =>
        chatInput({ messages, tools }, hermes, { kind: 'json_object', param: 'response_format' }),
      ),
    ).toBe('response_format');
  });
});
