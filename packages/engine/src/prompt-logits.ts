import type { BatchPlan } from '@kvasir/scheduler';
import type { LiveRequest } from './live-request.js';

/**
 * The extra logits rows of one step for echo requests that asked for log-probabilities: every
 * prompt position the step computes (its logits score the next prompt token), after the plan's
 * own sampling rows.
 */
export interface PromptLogitRows {
  /** The plan's `logitsIndices` followed by the prompt rows. */
  readonly logitsIndices: Int32Array;
  /** For each prompt row, in order: whose prompt, and which position. */
  readonly owners: readonly { readonly live: LiveRequest; readonly position: number }[];
}

/**
 * The prompt rows `plan` computes for echo requests with log-probabilities, or undefined when
 * it has none, so that every other plan runs exactly as the scheduler made it.
 */
export function promptLogitRows(
  plan: BatchPlan,
  live: ReadonlyMap<string, LiveRequest>,
): PromptLogitRows | undefined {
  let owners: { live: LiveRequest; position: number }[] | undefined;
  const extra: number[] = [];
  for (const row of plan.rows) {
    if (!row.isPrefill) continue;
    const request = live.get(row.requestId);
    if (!request?.request.echo || request.request.logprobs === undefined) continue;
    const first = plan.positions[row.queryStart]!;
    for (let i = 0; i < row.queryLen; i++) {
      if (!request.needsPromptLogits(first + i)) continue;
      owners ??= [];
      owners.push({ live: request, position: first + i });
      extra.push(row.queryStart + i);
    }
  }
  if (!owners) return undefined;
  const logitsIndices = new Int32Array(plan.logitsIndices.length + extra.length);
  logitsIndices.set(plan.logitsIndices);
  logitsIndices.set(extra, plan.logitsIndices.length);
  return { logitsIndices, owners };
}

/**
 * Hands each prompt row's logits (rows after the first `numSamples` of `logits`) to its
 * request. Called before sampling: an echo request sends its prompt ahead of its first token.
 */
export function recordPromptLogits(
  rows: PromptLogitRows,
  logits: Float32Array,
  numSamples: number,
  vocabSize: number,
): void {
  rows.owners.forEach(({ live, position }, k) => {
    const at = (numSamples + k) * vocabSize;
    live.recordPromptLogits(position, logits.subarray(at, at + vocabSize));
  });
}
