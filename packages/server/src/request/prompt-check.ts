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

/**
 * Refuses a text prompt too long for the context without tokenizing it: a text of B bytes makes
 * at least ⌈B / maxTextBytesPerToken⌉ tokens. Nothing is checked when the model does not state
 * that bound. Cheap: a text short enough in UTF-16 units is not even measured.
 * @throws EngineError `PROMPT_TOO_LONG` naming `param`.
 */
export function checkPromptBytes(model: ModelCard, text: string, param: string): void {
  const perToken = model.maxTextBytesPerToken;
  if (perToken === undefined || !(perToken > 0)) return;
  const limit = (model.maxModelLen - 1) * perToken;
  // A UTF-16 code unit is at most 3 bytes of UTF-8.
  if (text.length * 3 <= limit) return;
  const bytes = Buffer.byteLength(text);
  if (bytes > limit) {
    throw new EngineError(
      'PROMPT_TOO_LONG',
      `${param}: ${bytes} bytes of text make more than ${model.maxModelLen - 1} tokens (a token stands for at most ${perToken} bytes); the model's context is ${model.maxModelLen}`,
      { details: { param } },
    );
  }
}
