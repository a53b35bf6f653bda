import { EngineError, type GenerationRequest } from '@kvasir/server/spec';
import type { ModelFacts } from './model-runner.js';

/**
 * Bounds of a request with KV compression, whose cache no longer bounds its prompt (a policy
 * that streams it) or its generation (cache positions run past the context).
 */
export interface CompressedRequestLimits {
  /** Longest prompt (`--kv-compression-max-prompt-tokens`). */
  readonly maxPromptTokens: number;
  /** Largest `max_tokens` (`--kv-compression-max-tokens`). */
  readonly maxTokens: number;
  /** Longest prompt the policy can take: the context, unless it streams the prompt. */
  readonly maxModelLen: number;
}

/**
 * Checks a request against the model and the cache before it is queued, and returns the token
 * ids that end its choices (its own stop tokens, plus EOS unless ignored).
 * @throws EngineError `QUEUE_FULL` when `waiting` reached `maxWaiting`; `INVALID_REQUEST` for a
 *   prompt token id outside the vocabulary, or a compressed request's `max_tokens` over its
 *   bound; `PROMPT_TOO_LONG` for a prompt the cache can never hold (unless `streamsPrompt`: a
 *   compression policy that drops blocks between prefill chunks holds a bounded part of any
 *   prompt), and a compressed request's prompt over its bound or its `maxModelLen`.
 */
export function admit(
  request: GenerationRequest,
  facts: ModelFacts,
  queue: { readonly waiting: number; readonly maxWaiting: number },
  streamsPrompt = false,
  compressed?: CompressedRequestLimits,
): Set<number> {
  if (queue.waiting >= queue.maxWaiting) {
    throw new EngineError(
      'QUEUE_FULL',
      `the waiting queue is full (${queue.waiting} requests); retry later`,
      { details: { retryAfterSeconds: 1 } },
    );
  }
  const outside = request.promptTokens.findIndex(
    (id) => !Number.isInteger(id) || id < 0 || id >= facts.vocabSize,
  );
  if (outside >= 0) {
    throw new EngineError(
      'INVALID_REQUEST',
      `prompt: token ${outside} has id ${request.promptTokens[outside]}, outside the vocabulary [0, ${facts.vocabSize})`,
      { details: { param: 'prompt' } },
    );
  }
  const promptLen = request.promptTokens.length;
  if (compressed) {
    if (promptLen > compressed.maxPromptTokens) {
      throw new EngineError(
        'PROMPT_TOO_LONG',
        `prompt: ${promptLen} tokens; a request with kv_compression takes at most ${compressed.maxPromptTokens} (--kv-compression-max-prompt-tokens)`,
        { details: { param: 'prompt' } },
      );
    }
    if (promptLen > compressed.maxModelLen) {
      throw new EngineError(
        'PROMPT_TOO_LONG',
        `prompt: ${promptLen} tokens, over the context of ${compressed.maxModelLen} (only a kv_compression policy that drops blocks during prefill, in 'cache' positions, streams a longer prompt)`,
        { details: { param: 'prompt' } },
      );
    }
    if (request.maxTokens > compressed.maxTokens) {
      throw new EngineError(
        'INVALID_REQUEST',
        `max_tokens: ${request.maxTokens}; a request with kv_compression generates at most ${compressed.maxTokens} tokens (--kv-compression-max-tokens)`,
        { details: { param: 'max_tokens' } },
      );
    }
  }
  const promptBlocks = Math.ceil(promptLen / facts.kvLayout.blockSize);
  if (!streamsPrompt && promptBlocks > facts.numBlocks) {
    throw new EngineError(
      'PROMPT_TOO_LONG',
      `prompt: needs ${promptBlocks} KV blocks but the cache holds ${facts.numBlocks}`,
      { details: { param: 'prompt' } },
    );
  }
  const stopTokens = new Set<number>(request.stopTokenIds);
  if (!request.ignoreEos) for (const eos of facts.eosTokenIds) stopTokens.add(eos);
  return stopTokens;
}
