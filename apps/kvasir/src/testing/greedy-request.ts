import type { GenerationRequest } from '@kvasir/server/spec';

/** A greedy request that ignores EOS: the engine tests' common shape. */
export function greedyRequest(
  id: string,
  promptTokens: readonly number[],
  maxTokens: number,
  model = 'm',
): GenerationRequest {
  return {
    id,
    model,
    promptTokens,
    n: 1,
    maxTokens,
    sampling: {
      temperature: 0,
      topP: 1,
      topK: 0,
      minP: 0,
      presencePenalty: 0,
      frequencyPenalty: 0,
      repetitionPenalty: 1,
    },
    stopTokenIds: [],
    ignoreEos: true,
  };
}
