import { describe, expect, it } from 'vitest';
import { EngineError } from '../errors.js';
import { chatBodySchema, completionBodySchema, parseBody } from './schemas.js';
import { logitBias, outputConstraint } from './structured-output.js';

const chat = (fields: Record<string, unknown>) =>
  parseBody(chatBodySchema, { messages: [{ role: 'user', content: 'hi' }], ...fields });
const completion = (fields: Record<string, unknown>) =>
  parseBody(completionBodySchema, { prompt: 'hi', ...fields });

function refusal(fn: () => unknown): { param: unknown; message: string } {
  try {
    fn();
  } catch (e) {
    expect(EngineError.isInstance(e) && e.code).toBe('INVALID_REQUEST');
    return { param: (e as EngineError).details?.param, message: (e as Error).message };
  }
  throw new Error('expected a refusal');
}

describe('structured output fields', () => {
  const schema = { type: 'object', properties: { a: { type: 'integer' } }, required: ['a'] };

  it("maps OpenAI's response_format", () => {
    expect(outputConstraint(chat({ response_format: { type: 'text' } }))).toBeUndefined();
    expect(outputConstraint(chat({ response_format: { type: 'json_object' } }))).toEqual({
      kind: 'json_object',
      param: 'response_format',
    });
    expect(
      outputConstraint(
        chat({
          response_format: {
            type: 'json_schema',
            json_schema: { name: 'thing', schema, strict: true },
          },
        }),
      ),
    ).toEqual({ kind: 'json_schema', schema, param: 'response_format' });
    // No schema: any JSON object, as OpenAI.
    expect(
      outputConstraint(
        chat({ response_format: { type: 'json_schema', json_schema: { name: 'x' } } }),
      ),
    ).toEqual({ kind: 'json_object', param: 'response_format' });
    expect(
      refusal(() =>
        chat({ response_format: { type: 'json_schema', json_schema: { name: 'a b' } } }),
      ).param,
    ).toBe('response_format.json_schema.name');
    expect(refusal(() => chat({ response_format: { type: 'yaml' } })).param).toBe(
      'response_format.type',
    );
  });

  it("maps vLLM's guided decoding fields on both endpoints", () => {
    expect(outputConstraint(completion({ guided_json: schema }))).toEqual({
      kind: 'json_schema',
      schema,
      param: 'guided_json',
    });
    expect(outputConstraint(chat({ guided_json: JSON.stringify(schema) }))).toEqual({
      kind: 'json_schema',
      schema,
      param: 'guided_json',
    });
    expect(outputConstraint(completion({ guided_regex: '[a-z]+' }))).toEqual({
      kind: 'regex',
      pattern: '[a-z]+',
      param: 'guided_regex',
    });
    expect(outputConstraint(chat({ guided_grammar: 'root ::= "x"' }))).toEqual({
      kind: 'grammar',
      grammar: 'root ::= "x"',
      param: 'guided_grammar',
    });
    expect(
      outputConstraint(completion({ guided_choice: ['yes', 'no "really"', 'a\\b\n'] })),
    ).toEqual({
      kind: 'grammar',
      grammar: 'root ::= "yes" | "no \\"really\\"" | "a\\\\b\\x0a"',
      param: 'guided_choice',
    });
    expect(refusal(() => outputConstraint(completion({ guided_json: '{not json' }))).param).toBe(
      'guided_json',
    );
  });

  it('refuses two constraints at once, naming the second', () => {
    const r = refusal(() =>
      outputConstraint(chat({ response_format: { type: 'json_object' }, guided_regex: 'a+' })),
    );
    expect(r.param).toBe('guided_regex');
    expect(r.message).toMatch(/only one of/);
  });

  it('reads logit_bias with token-id keys and bounds of ±100', () => {
    expect(logitBias(chat({ logit_bias: { '50256': -100, '7': 2.5 } }))).toEqual({
      50256: -100,
      7: 2.5,
    });
    expect(logitBias(chat({ logit_bias: {} }))).toBeUndefined();
    expect(refusal(() => chat({ logit_bias: { '7': 101 } })).param).toBe('logit_bias.7');
    expect(refusal(() => completion({ logit_bias: { x: 1 } })).param).toMatch(/^logit_bias/);
  });
});
