import { EngineError, type GenerationRequest } from '@kvasir/server/spec';
import type { ModelFacts } from './model-runner.js';

/**
 * Checks a request against the model and the cache before it is queued, and returns the token
 * ids that end its choices (its own stop tokens, plus EOS unless ignored).
 * @throws EngineError `QUEUE_FULL` when `waiting` reached `maxWaiting`; `INVALID_REQUEST` for a
 *   prompt token id outside the vocabulary; `PROMPT_TOO_LONG` for a prompt the cache can never
 *   hold (unless `streamsPrompt`: a compression policy that drops blocks between prefill
 *   chunks holds a bounded part of any prompt, which the scheduler checks).
 */
export function admit(
  request: GenerationRequest,
  facts: ModelFacts,
  queue: { readonly waiting: number; readonly maxWaiting: number },
  streamsPrompt = false,
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
  const promptBlocks = Math.ceil(request.promptTokens.length / facts.kvLayout.blockSize);
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
