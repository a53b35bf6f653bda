// What a finished request reports: its sequences' tokens in output order, and the request's
// reason. Reads the group only; freeing its blocks is the request table's job.
import type { SequenceGroup } from './request-state.js';
import type { FinishReason, RequestOutput, SequenceOutput } from './types.js';

/**
 * The output of a group that ends now with `reason` (`detail` explains a 'rejected' or a
 * cache-capacity 'length'). Beam search reports the `beamWidth` best of its finished and live
 * beams, best first, and the best beam's reason; other groups report every sequence by index.
 */
export function assembleRequestOutput(
  g: SequenceGroup,
  reason: FinishReason,
  detail: string | undefined,
  finishTime: number,
): RequestOutput {
  let outputs: SequenceOutput[];
  if (g.beamWidth > 1) {
    const all: SequenceOutput[] = [...g.finishedBeams];
    for (const s of g.seqs) {
      all.push({
        index: 0,
        tokenIds: s.tokens.slice(g.numPromptTokens, s.numTokens),
        finishReason: s.finishReason!,
        cumulativeLogprob: s.cumLogprob,
      });
    }
    all.sort((a, b) => b.cumulativeLogprob - a.cumulativeLogprob);
    outputs = all.slice(0, g.beamWidth).map((o, index) => ({ ...o, index }));
    if ((reason === 'stop' || reason === 'length') && outputs[0]) {
      reason = outputs[0].finishReason;
    }
  } else {
    outputs = g.seqs
      .slice()
      .sort((a, b) => a.index - b.index)
      .map((s) => ({
        index: s.index,
        tokenIds: s.tokens.slice(g.numPromptTokens, s.numTokens),
        finishReason: s.finishReason!,
        cumulativeLogprob: s.cumLogprob,
      }));
  }
  return {
    requestId: g.req.id,
    finishReason: reason,
    ...(detail !== undefined ? { reason: detail } : {}),
    outputs,
    numPromptTokens: g.numPromptTokens,
    numCachedPromptTokens: g.numCachedPromptTokens,
    numPreemptions: g.numPreemptions,
    arrivalTime: g.arrivalTime,
    firstTokenTime: g.firstTokenTime,
    finishTime,
  };
}
