import { EngineError } from '../errors.js';
import type { GenerationStream, TokenLogprob } from '../generation-events.js';
import type { ServerMetrics } from '../metrics.js';
import type { PreparedRequest } from '../request/prepare.js';
import { readGeneration, type Tally, usageJson } from './choices.js';
import { chatLogprobs, completionLogprobs, type EchoedPrompt } from './logprobs.js';
import { toolCallMessage } from './tool-calls.js';

/**
 * Reads every stream of a request (one per prompt of a batch) to its end and builds the
 * non-streamed OpenAI response: a `text_completion` (choice `p * n + i` is prompt p's choice
 * i, each starting with its echoed prompt when asked) or a `chat.completion`.
 * @throws the first stream's error; the other prompts of the batch are aborted with it.
 */
export async function collectResponse(
  prepared: PreparedRequest,
  streams: readonly GenerationStream[],
  controller: AbortController,
  arrived: number,
  metrics: ServerMetrics,
) {
  const first = prepared.requests[0]!;
  const n = first.n;
  const texts: string[][] = streams.map(() => Array.from({ length: n }, () => ''));
  const logprobs: TokenLogprob[][][] = streams.map(() => Array.from({ length: n }, () => []));
  const settled = await Promise.allSettled(
    streams.map((stream, p) =>
      readGeneration(prepared.requests[p]!, stream, controller.signal, arrived, metrics, (i, e) => {
        texts[p]![i] += e.text;
        logprobs[p]![i]!.push(...e.logprobs);
      }).catch((error: unknown) => {
        // One prompt of a batch failed: the others stop too, the response is the error.
        controller.abort(error);
        throw error;
      }),
    ),
  );
  const tallies: Tally[] = [];
  for (const result of settled) {
    if (result.status === 'rejected') throw result.reason;
    tallies.push(result.value);
  }
  const wantLogprobs = first.logprobs !== undefined;
  const withTop = (first.logprobs ?? 0) > 0;
  const base = { id: first.id, created: prepared.created, model: first.model };
  if (prepared.kind === 'completion') {
    const choices = tallies.flatMap((tally, p) => {
      let echoed: EchoedPrompt | undefined;
      let echoText = '';
      if (prepared.echo) {
        const prompt = tally.prompt;
        if (!prompt || (wantLogprobs && !prompt.logprobs)) {
          throw new EngineError('INTERNAL', 'the engine did not echo the prompt');
        }
        // OpenAI echoes the prompt as sent; token ids come back as the engine decodes them.
        echoText = prepared.promptTexts[p] ?? prompt.text;
        echoed = { prompt, textLength: echoText.length };
      }
      return texts[p]!.map((text, i) => ({
        // OpenAI numbers the choices of a batch prompt after prompt: prompt p, choice i.
        index: p * n + i,
        text: echoText + text,
        logprobs: wantLogprobs ? completionLogprobs(logprobs[p]![i]!, withTop, echoed) : null,
        finish_reason: tally.finishReasons[i] ?? 'abort',
      }));
    });
    const usage = tallies.reduce(
      (sum, t) => ({
        promptTokens: sum.promptTokens + t.usage.promptTokens,
        cachedPromptTokens: sum.cachedPromptTokens + t.usage.cachedPromptTokens,
        completionTokens: sum.completionTokens + t.usage.completionTokens,
      }),
      { promptTokens: 0, cachedPromptTokens: 0, completionTokens: 0 },
    );
    return { ...base, object: 'text_completion', choices, usage: usageJson(usage) };
  }
  const tally = tallies[0]!;
  const syntax = prepared.toolCalls;
  return {
    ...base,
    object: 'chat.completion',
    choices: texts[0]!.map((text, i) => {
      const finishReason = tally.finishReasons[i] ?? 'abort';
      const logprobsJson = wantLogprobs ? chatLogprobs(logprobs[0]![i]!) : null;
      if (!syntax) {
        return {
          index: i,
          message: { role: 'assistant', content: text, refusal: null },
          logprobs: logprobsJson,
          finish_reason: finishReason,
        };
      }
      const { finish_reason, content, ...calls } = toolCallMessage(syntax, text, finishReason);
      return {
        index: i,
        message: { role: 'assistant', content, refusal: null, ...calls },
        logprobs: logprobsJson,
        finish_reason,
      };
    }),
    usage: usageJson(tally.usage),
  };
}
