import { performance } from 'node:perf_hooks';
import { EngineError } from '../errors.js';
import type {
  FinishReason,
  GenerationStream,
  PromptEvent,
  TokenLogprob,
} from '../generation-events.js';
import type { GenerationRequest } from '../inference-engine.js';
import type { ServerMetrics } from '../metrics.js';

/** What one choice adds to the response after an engine delta. */
export interface ChoiceEmission {
  readonly text: string;
  readonly logprobs: readonly TokenLogprob[];
  /** Set when the choice has just ended. */
  readonly finishReason?: FinishReason;
}

/** Token accounting of one request, as the usage event (or the server's count) gives it. */
export interface Usage {
  readonly promptTokens: number;
  readonly cachedPromptTokens: number;
  readonly completionTokens: number;
}

/** What a generation stream produced, once it has ended. */
export interface Tally {
  /** Each choice's finish reason (`abort` when the stream ended without one). */
  readonly finishReasons: FinishReason[];
  /** The echoed prompt, when the request asked for `echo`. */
  readonly prompt: PromptEvent | undefined;
  readonly usage: Usage;
}

/**
 * Reads one generation stream to its end: calls `emit` for each visible change of a choice
 * (deltas with no text, log-probabilities or finish reason are skipped, and so is anything
 * after a choice's end), then records the request in `metrics`.
 * @throws the engine's error, or the abort reason when it is an `EngineError` (a timeout, a
 *   shutdown); a client that went away ends the stream quietly.
 */
export async function readGeneration(
  request: GenerationRequest,
  stream: GenerationStream,
  signal: AbortSignal,
  arrived: number,
  metrics: ServerMetrics,
  emit: (index: number, e: ChoiceEmission) => Promise<void> | void,
): Promise<Tally> {
  const finishReasons: (FinishReason | undefined)[] = Array.from({ length: request.n });
  const tokenCounts = new Array<number>(request.n).fill(0);
  let prompt: PromptEvent | undefined;
  let usage: Usage | undefined;
  let firstTokenAt: number | undefined;
  let lastTokenAt: number | undefined;
  try {
    for await (const event of stream) {
      if (event.kind === 'usage') {
        usage = event;
        continue;
      }
      if (event.kind === 'prompt') {
        prompt = event;
        continue;
      }
      const index = event.index;
      if (!(index >= 0 && index < request.n)) continue;
      tokenCounts[index]! += event.tokenIds.length;
      if (event.tokenIds.length > 0) {
        const now = (performance.now() - arrived) / 1000;
        firstTokenAt ??= now;
        lastTokenAt = now;
      }
      if (finishReasons[index] !== undefined) continue;
      const logprobs = event.logprobs ?? [];
      if (event.finishReason !== undefined) finishReasons[index] = event.finishReason;
      if (event.text === '' && logprobs.length === 0 && event.finishReason === undefined) continue;
      await emit(index, {
        text: event.text,
        logprobs,
        ...(event.finishReason === undefined ? {} : { finishReason: event.finishReason }),
      });
    }
  } catch (error) {
    if (!signal.aborted) throw error;
  }
  if (signal.aborted) {
    const reason: unknown = signal.reason;
    if (EngineError.isInstance(reason)) throw reason;
  }
  // An engine that ends without finishing a choice has been cut short.
  const finished = finishReasons.map((r) => r ?? 'abort');
  usage ??= {
    promptTokens: request.promptTokens.length,
    cachedPromptTokens: 0,
    completionTokens: tokenCounts.reduce((sum, c) => sum + c, 0),
  };
  metrics.observeRequest({
    promptTokens: usage.promptTokens,
    generatedTokens: usage.completionTokens,
    firstTokenAt,
    lastTokenAt,
    tokensOfSlowestChoice: Math.max(...tokenCounts),
    finishReason: finished[0] ?? 'abort',
  });
  return { finishReasons: finished, prompt, usage };
}

/** OpenAI's `usage` object. */
export function usageJson(u: Usage) {
  return {
    prompt_tokens: u.promptTokens,
    completion_tokens: u.completionTokens,
    total_tokens: u.promptTokens + u.completionTokens,
    prompt_tokens_details: { cached_tokens: u.cachedPromptTokens },
  };
}
