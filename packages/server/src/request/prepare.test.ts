import { describe, expect, it } from 'vitest';
import { EngineError } from '../errors.js';
import type { ChatMessage, ModelCard } from '../inference-engine.js';
import { type PrepareContext, prepareRequest } from './prepare.js';

const model: ModelCard = { id: 'm', created: 0, ownedBy: 't', maxModelLen: 32, vocabSize: 1000 };
const calls: string[] = [];
const engine: PrepareContext['engine'] = {
  listModels: () => [model, { ...model, id: 'other' }],
  tokenize: (_m, text) => {
    calls.push(`tokenize ${text}`);
    return Array.from(text, (c) => c.charCodeAt(0));
  },
  applyChatTemplate: (_m, messages: readonly ChatMessage[]) =>
    Array.from(messages.map((m) => `${m.role}:${m.content}`).join('|'), (c) => c.charCodeAt(0)),
};
const context: PrepareContext = { engine, maxN: 4, id: 'cmpl-x', created: 7 };

async function refusal(promise: Promise<unknown>) {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(EngineError.isInstance(error)).toBe(true);
  const e = error as EngineError;
  return { code: e.code, message: e.message, param: e.details?.param };
}

describe('prepareRequest', () => {
  it('turns a completions body into one engine request with every default filled', async () => {
    const prepared = await prepareRequest('completion', { prompt: 'hi' }, context);
    expect(prepared).toEqual({
      kind: 'completion',
      requests: [
        {
          id: 'cmpl-x',
          model: 'm',
          promptTokens: [104, 105],
          n: 1,
          maxTokens: 16,
          sampling: {
            temperature: 1,
            topP: 1,
            topK: 0,
            minP: 0,
            presencePenalty: 0,
            frequencyPenalty: 0,
            repetitionPenalty: 1,
          },
          stopTokenIds: [],
          ignoreEos: false,
        },
      ],
      echo: false,
      promptTexts: ['hi'],
      stream: false,
      includeUsage: false,
      created: 7,
    });
  });

  it('passes stop strings (empty ones dropped), sampling, logprobs and kv_compression through', async () => {
    const { requests } = await prepareRequest(
      'completion',
      {
        model: 'other',
        prompt: [5, 6],
        stop: ['', 'END', 'x'],
        temperature: 0,
        top_k: -1,
        seed: 3,
        logprobs: 2,
        n: 2,
        best_of: 2,
        max_tokens: 100,
        kv_compression: { policy: 'sinks', sinks: 4 },
      },
      context,
    );
    expect(requests[0]).toMatchObject({
      model: 'other',
      promptTokens: [5, 6],
      n: 2,
      // A compressed cache may outrun the context: max_tokens is not cut to it.
      maxTokens: 100,
      stopStrings: ['END', 'x'],
      logprobs: 2,
      sampling: { temperature: 0, topK: 0, seed: 3 },
      kvCompression: { policy: 'sinks', sinks: 4 },
    });
    const single = await prepareRequest('completion', { prompt: 'a', stop: 'Q' }, context);
    expect(single.requests[0]!.stopStrings).toEqual(['Q']);
  });

  it('gives each prompt of a batch its own id, and cuts the default max_tokens to the room left', async () => {
    const prompt = ['a', 'b'.repeat(28)];
    const { requests, promptTexts } = await prepareRequest(
      'completion',
      { prompt, echo: true },
      context,
    );
    expect(requests.map((r) => r.id)).toEqual(['cmpl-x', 'cmpl-x-1']);
    expect(requests.map((r) => r.maxTokens)).toEqual([16, 4]);
    expect(requests.every((r) => r.echo)).toBe(true);
    expect(promptTexts).toEqual(prompt);
  });

  it('applies the chat template and prefers max_completion_tokens', async () => {
    const prepared = await prepareRequest(
      'chat',
      {
        messages: [{ role: 'user', content: [{ type: 'text', text: 'yo' }] }],
        max_tokens: 3,
        max_completion_tokens: 5,
        logprobs: true,
        top_logprobs: 2,
        stream: true,
        stream_options: { include_usage: true },
      },
      { ...context, id: 'chatcmpl-y' },
    );
    expect(prepared.requests[0]).toMatchObject({
      id: 'chatcmpl-y',
      promptTokens: Array.from('user:yo', (c) => c.charCodeAt(0)),
      maxTokens: 5,
      logprobs: 2,
    });
    expect(prepared).toMatchObject({ kind: 'chat', stream: true, includeUsage: true });
  });

  it('refuses what it cannot serve, naming the field', async () => {
    const cases: [unknown, string, string][] = [
      [{ prompt: 'a', n: 5 }, 'INVALID_REQUEST', 'n'],
      [{ prompt: 'a', best_of: 3 }, 'INVALID_REQUEST', 'best_of'],
      [{ prompt: 'a', max_tokens: 0 }, 'INVALID_REQUEST', 'max_tokens'],
      [{ prompt: 'a', echo: true, stream: true }, 'INVALID_REQUEST', 'echo'],
      [{ prompt: ['a', 'b'], stream: true }, 'INVALID_REQUEST', 'prompt'],
      [{ prompt: 'a', max_tokens: 40 }, 'INVALID_REQUEST', 'max_tokens'],
      [{ prompt: 'x'.repeat(32) }, 'PROMPT_TOO_LONG', 'prompt'],
      [{ prompt: ['a', 'x'.repeat(40)] }, 'PROMPT_TOO_LONG', 'prompt[1]'],
      [{ prompt: [1, 5000] }, 'INVALID_REQUEST', 'prompt'],
      [{ prompt: 'a', model: 'nope' }, 'MODEL_NOT_FOUND', 'model'],
      [{ prompt: 'a', temperature: 9 }, 'INVALID_REQUEST', 'temperature'],
    ];
    for (const [body, code, param] of cases) {
      expect(await refusal(prepareRequest('completion', body, context))).toMatchObject({
        code,
        param,
      });
    }
    expect(
      await refusal(
        prepareRequest(
          'chat',
          { messages: [{ role: 'user', content: 'a' }], top_logprobs: 1 },
          context,
        ),
      ),
    ).toMatchObject({ param: 'top_logprobs' });
  });

  it('asks checkAccepting after the body and model are valid, before tokenizing', async () => {
    calls.length = 0;
    const refuse = () => {
      calls.push('checkAccepting');
      throw new EngineError('DRAINING', 'shutting down');
    };
    expect(
      await refusal(
        prepareRequest('completion', { prompt: 'abc' }, { ...context, checkAccepting: refuse }),
      ),
    ).toMatchObject({ code: 'DRAINING' });
    expect(
      await refusal(
        prepareRequest('completion', { prompt: 7 }, { ...context, checkAccepting: refuse }),
      ),
    ).toMatchObject({ code: 'INVALID_REQUEST', param: 'prompt' });
    expect(calls).toEqual(['checkAccepting']);
  });
});
