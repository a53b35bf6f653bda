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

  it('refuses a non-streamed answer past maxResponseBytes before generating, naming the field', async () => {
    // 16 prompts of 30 tokens, echoed with 20 alternatives each: about 16 × 30 × 680 bytes.
    const batch = {
      prompt: Array.from({ length: 16 }, () => Array.from({ length: 30 }, (_, i) => i + 1)),
      max_tokens: 1,
      echo: true,
      logprobs: 20,
    };
    const small = { ...context, maxResponseBytes: 64 * 1024 };
    expect(await refusal(prepareRequest('completion', batch, small))).toMatchObject({
      code: 'INVALID_REQUEST',
      param: 'logprobs',
    });
    // The same request fits a larger bound, or without the alternatives.
    await expect(
      prepareRequest('completion', batch, { ...small, maxResponseBytes: 1024 * 1024 }),
    ).resolves.toBeDefined();
    await expect(
      prepareRequest('completion', { ...batch, logprobs: undefined }, small),
    ).resolves.toBeDefined();
    // Without log-probabilities, n × max_tokens is what is too large.
    const long = { prompt: 'x', n: 4, max_tokens: 25 };
    expect(
      await refusal(prepareRequest('completion', long, { ...context, maxResponseBytes: 512 })),
    ).toMatchObject({ param: 'max_tokens' });
    // A stream is sent as it is made: no bound.
    await expect(
      prepareRequest(
        'completion',
        { ...long, stream: true },
        { ...context, maxResponseBytes: 512 },
      ),
    ).resolves.toBeDefined();
  });

  it('refuses a text that cannot fit the context by its bytes, before tokenizing any prompt', async () => {
    calls.length = 0;
    // A token stands for at most 2 bytes: 62 bytes may fit 31 tokens, 63 make at least 32.
    const bounded = { ...model, maxTextBytesPerToken: 2 };
    const ctx: PrepareContext = { ...context, engine: { ...engine, listModels: () => [bounded] } };
    expect(
      await refusal(prepareRequest('completion', { prompt: ['ok', 'é'.repeat(32)] }, ctx)),
    ).toMatchObject({ code: 'PROMPT_TOO_LONG', param: 'prompt[1]' });
    expect(calls).toEqual([]);
    // At the bound it is tokenized (and here found short enough).
    await expect(
      prepareRequest('completion', { prompt: 'x'.repeat(62), max_tokens: 1 }, ctx),
    ).rejects.toMatchObject({ code: 'PROMPT_TOO_LONG' });
    expect(calls).toHaveLength(1);
    // A request whose compressed cache may outrun the context is tokenized and left to the engine.
    await expect(
      prepareRequest(
        'completion',
        { prompt: 'é'.repeat(32), max_tokens: 1, kv_compression: { policy: 'window', window: 8 } },
        ctx,
      ),
    ).resolves.toBeDefined();
    expect(calls).toHaveLength(2);
  });
});

describe('prepareRequest: structured outputs and tools', () => {
  const toolModel: ModelCard = { ...model, maxModelLen: 4096, toolCallFormat: 'hermes' };
  const templates: unknown[] = [];
  const capable: PrepareContext['engine'] = {
    capabilities: {
      outputConstraints: ['json_object', 'json_schema', 'grammar', 'regex', 'structural_tag'],
      logitBias: true,
    },
    listModels: () => [toolModel, { ...toolModel, id: 'plain', toolCallFormat: undefined }],
    tokenize: (_m, text) => Array.from(text, (c) => c.charCodeAt(0)),
    applyChatTemplate: (_m, messages, options) => {
      templates.push({ messages, options });
      return [1, 2, 3];
    },
  };
  const ctx: PrepareContext = { engine: capable, maxN: 4, id: 'chatcmpl-x', created: 7 };
  const weather = {
    type: 'function',
    function: {
      name: 'get_weather',
      parameters: { type: 'object', properties: { city: { type: 'string' } } },
    },
  };
  const chat = (fields: Record<string, unknown>, model = 'm') => ({
    model,
    messages: [{ role: 'user', content: 'hi' }],
    ...fields,
  });

  it('passes response_format and logit_bias to the engine', async () => {
    const schema = { type: 'object', properties: { a: { type: 'integer' } } };
    const p = await prepareRequest(
      'chat',
      chat({
        response_format: { type: 'json_schema', json_schema: { name: 'a', schema, strict: true } },
        logit_bias: { '5': -100 },
      }),
      ctx,
    );
    expect(p.requests[0]!.constraint).toEqual({
      kind: 'json_schema',
      schema,
      param: 'response_format',
    });
    expect(p.requests[0]!.sampling.logitBias).toEqual({ 5: -100 });
    expect(p.toolCalls).toBeUndefined();
  });

  it('refuses what the engine does not declare, naming the field, instead of ignoring it', async () => {
    const c = {
      ...ctx,
      engine: { ...capable, capabilities: { outputConstraints: ['regex' as const] } },
    };
    expect(
      await refusal(prepareRequest('chat', chat({ response_format: { type: 'json_object' } }), c)),
    ).toMatchObject({ code: 'INVALID_REQUEST', param: 'response_format' });
    expect(
      await refusal(prepareRequest('completion', { prompt: 'x', logit_bias: { '1': 1 } }, c)),
    ).toMatchObject({ code: 'INVALID_REQUEST', param: 'logit_bias' });
    expect(await refusal(prepareRequest('chat', chat({ tools: [weather] }), c))).toMatchObject({
      param: 'tools',
    });
    // Plain requests still run.
    await prepareRequest('completion', { prompt: 'x', guided_regex: 'a+' }, c);
  });

  it('renders tools and past calls through the template and constrains a forced call', async () => {
    templates.length = 0;
    const p = await prepareRequest(
      'chat',
      chat({
        messages: [
          { role: 'user', content: 'weather?' },
          {
            role: 'assistant',
            content: null,
            tool_calls: [
              {
                id: 'call_1',
                type: 'function',
                function: { name: 'get_weather', arguments: '{"city": "Oslo"}' },
              },
            ],
          },
          { role: 'tool', tool_call_id: 'call_1', content: 'rain' },
        ],
        tools: [weather],
        tool_choice: { type: 'function', function: { name: 'get_weather' } },
        parallel_tool_calls: false,
      }),
      ctx,
    );
    expect(templates[0]).toEqual({
      messages: [
        { role: 'user', content: 'weather?' },
        {
          role: 'assistant',
          content: '',
          toolCalls: [{ id: 'call_1', name: 'get_weather', arguments: '{"city": "Oslo"}' }],
        },
        { role: 'tool', content: 'rain', toolCallId: 'call_1' },
      ],
      options: { tools: [weather] },
    });
    expect(p.toolCalls?.name).toBe('hermes');
    expect(p.requests[0]!.constraint).toMatchObject({
      kind: 'structural_tag',
      param: 'tools',
      format: { type: 'tag', begin: '<tool_call>\n{"name": "get_weather", "arguments": ' },
    });
  });

  it('tool_choice none lists the tools but neither constrains nor parses', async () => {
    const p = await prepareRequest('chat', chat({ tools: [weather], tool_choice: 'none' }), ctx);
    expect(p.requests[0]!.constraint).toBeUndefined();
    expect(p.toolCalls).toBeUndefined();
  });

  it('refuses unknown and duplicate tools, a choice without tools, a model without a format', async () => {
    expect(
      await refusal(
        prepareRequest(
          'chat',
          chat({ tools: [weather], tool_choice: { type: 'function', function: { name: 'nope' } } }),
          ctx,
        ),
      ),
    ).toMatchObject({
      param: 'tool_choice',
      message: "tool_choice: unknown tool 'nope' (declared: get_weather)",
    });
    expect(
      await refusal(prepareRequest('chat', chat({ tools: [weather, weather] }), ctx)),
    ).toMatchObject({ param: 'tools[1].function.name' });
    expect(
      await refusal(prepareRequest('chat', chat({ tool_choice: 'required' }), ctx)),
    ).toMatchObject({ param: 'tool_choice' });
    expect(
      await refusal(prepareRequest('chat', chat({ tools: [weather] }, 'plain'), ctx)),
    ).toMatchObject({ param: 'tools' });
    expect(
      await refusal(
        prepareRequest(
          'chat',
          chat({ tools: [weather], response_format: { type: 'json_object' } }),
          ctx,
        ),
      ),
    ).toMatchObject({ param: 'response_format' });
    expect(
      await refusal(prepareRequest('chat', chat({ functions: [{ name: 'f' }] }), ctx)),
    ).toMatchObject({ param: 'functions' });
  });
});
