// The AI SDK's call options as the engine's OpenAI-shaped chat request, with a warning for
// each setting it cannot honour (the spec's way) and an error for what it cannot run.
import {
  type LanguageModelV3CallOptions,
  type SharedV3Warning,
  UnsupportedFunctionalityError,
} from '@ai-sdk/provider';
import type { ChatCompletionRequest } from '../create-engine.js';
import type { SamplingFields, ToolRequestFields } from '../openai-request.js';
import { chatMessages } from './prompt.js';

/**
 * Kvasir's own request fields, passed as `providerOptions: { kvasir: { ... } }`: min-p,
 * repetition penalty, logit bias, `ignore_eos`, token-level KV compression.
 */
export type KvasirProviderOptions = Pick<
  SamplingFields,
  'min_p' | 'repetition_penalty' | 'logit_bias' | 'ignore_eos' | 'kv_compression'
>;

const PROVIDER_FIELDS = [
  'min_p',
  'repetition_penalty',
  'logit_bias',
  'ignore_eos',
  'kv_compression',
] as const;

/** The chat request of `options`, and the warnings to report. */
export function chatRequest(
  options: LanguageModelV3CallOptions,
  defaults: KvasirProviderOptions,
): { body: ChatCompletionRequest; warnings: SharedV3Warning[] } {
  const warnings: SharedV3Warning[] = [];
  // `headers` are ignored: no HTTP request is made (the AI SDK always sends a user-agent).
  const own = { ...defaults, ...pickOwn(options.providerOptions?.kvasir) };
  const format = options.responseFormat;
  const body: ChatCompletionRequest = {
    messages: chatMessages(options.prompt, warnings),
    ...(options.maxOutputTokens === undefined ? {} : { max_tokens: options.maxOutputTokens }),
    ...(options.temperature === undefined ? {} : { temperature: options.temperature }),
    ...(options.topP === undefined ? {} : { top_p: options.topP }),
    ...(options.topK === undefined ? {} : { top_k: options.topK }),
    ...(options.presencePenalty === undefined ? {} : { presence_penalty: options.presencePenalty }),
    ...(options.frequencyPenalty === undefined
      ? {}
      : { frequency_penalty: options.frequencyPenalty }),
    ...(options.seed === undefined ? {} : { seed: options.seed }),
    ...(options.stopSequences?.length ? { stop: options.stopSequences } : {}),
    ...toolFields(options),
    ...(format?.type === 'json'
      ? {
          response_format: format.schema
            ? {
                type: 'json_schema' as const,
                json_schema: { name: format.name ?? 'response', schema: format.schema },
              }
            : { type: 'json_object' as const },
        }
      : {}),
    ...own,
  };
  return { body, warnings };
}

/**
 * The call's function tools and tool choice as OpenAI's `tools` and `tool_choice`.
 * @throws UnsupportedFunctionalityError for a provider-defined tool (no provider runs them here).
 */
function toolFields(options: LanguageModelV3CallOptions): ToolRequestFields {
  if (!options.tools?.length) return {};
  const tools = options.tools.map((t) => {
    if (t.type !== 'function') {
      throw new UnsupportedFunctionalityError({
        functionality: `provider-defined tools (${t.id}): the in-page engine calls function tools only`,
      });
    }
    return {
      type: 'function' as const,
      function: {
        name: t.name,
        ...(t.description === undefined ? {} : { description: t.description }),
        parameters: t.inputSchema as Record<string, unknown>,
        ...(t.strict === undefined ? {} : { strict: t.strict }),
      },
    };
  });
  const choice = options.toolChoice;
  return {
    tools,
    ...(choice === undefined
      ? {}
      : {
          tool_choice:
            choice.type === 'tool'
              ? { type: 'function' as const, function: { name: choice.toolName } }
              : choice.type,
        }),
  };
}

function pickOwn(options: Record<string, unknown> | undefined): KvasirProviderOptions {
  const own: Record<string, unknown> = {};
  for (const key of PROVIDER_FIELDS) if (options?.[key] !== undefined) own[key] = options[key];
  return own as KvasirProviderOptions;
}
