/**
 * `@kvasir/web/ai-sdk`: the in-page engine as a Vercel AI SDK model (`LanguageModelV3`).
 *
 * @example
 * ```ts
 * import { createEngine } from '@kvasir/web';
 * import { kvasir } from '@kvasir/web/ai-sdk';
 * import { streamText } from 'ai';
 *
 * const engine = await createEngine({ model: '/models/kvasir-mini.gguf' });
 * const result = streamText({ model: kvasir(engine), prompt: 'Tell me about paged attention.' });
 * for await (const text of result.textStream) output.append(text);
 * ```
 */
import type { KvasirProviderOptions } from './ai-sdk/call-options.js';
import { type KvasirChatEngine, KvasirLanguageModel } from './ai-sdk/language-model.js';

export type { KvasirProviderOptions } from './ai-sdk/call-options.js';
export {
  finishReason,
  type KvasirChatEngine,
  KvasirLanguageModel,
  streamParts,
  usageOf,
} from './ai-sdk/language-model.js';

/**
 * The AI SDK model of `engine` (the model it loaded). `defaults` are Kvasir's own request
 * fields for every call; a call's `providerOptions.kvasir` overrides them.
 */
export function kvasir(
  engine: KvasirChatEngine,
  defaults: KvasirProviderOptions = {},
): KvasirLanguageModel {
  return new KvasirLanguageModel(engine, defaults);
}
