import { EngineError } from '../errors.js';
import type { ModelCard } from '../inference-engine.js';

/**
 * Checks one prompt's token ids against the model; returns the room left for generation.
 * @throws EngineError `INVALID_REQUEST` for bad or out-of-vocabulary ids or an empty prompt,
 *   `PROMPT_TOO_LONG` for a prompt that fills the context (unless `unbounded`: a request whose
 *   KV cache is compressed may outrun the context).
 */
export function checkPrompt(
  model: ModelCard,
  promptTokens: readonly number[],
  param: string,
  unbounded = false,
): number {
  for (const id of promptTokens) {
    if (!Number.isInteger(id) || id < 0) {
      throw new EngineError(
        'INVALID_REQUEST',
        `${param}: token ids must be non-negative integers`,
        {
          details: { param },
        },
      );
    }
  }
  const vocabSize = model.vocabSize;
  if (vocabSize !== undefined) {
    const outside = promptTokens.findIndex((id) => id >= vocabSize);
    if (outside >= 0) {
      throw new EngineError(
        'INVALID_REQUEST',
        `${param}: token ${outside} has id ${promptTokens[outside]}, outside the vocabulary of ${vocabSize} tokens`,
        { details: { param } },
      );
    }
  }
  if (promptTokens.length === 0) {
    throw new EngineError('INVALID_REQUEST', `${param}: the prompt is empty`, {
      details: { param },
    });
  }
  const room = model.maxModelLen - promptTokens.length;
  if (room <= 0 && !unbounded) {
    throw new EngineError(
      'PROMPT_TOO_LONG',
      `${param}: the prompt has ${promptTokens.length} tokens; the model's context is ${model.maxModelLen}`,
      { details: { param } },
    );
  }
  return room;
}
