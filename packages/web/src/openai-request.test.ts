import { describe, expect, it } from 'vitest';
import { WebEngineError } from './errors.js';
import { generateParams } from './openai-request.js';

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
