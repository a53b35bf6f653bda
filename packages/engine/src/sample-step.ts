import type { Sampler } from '@kvasir/model';
import type { BatchPlan } from '@kvasir/scheduler';
import type { LiveRequest } from './live-request.js';
import type { ModelRunner } from './model-runner.js';
import type { JumpForward } from './output-constraints.js';
import { promptLogitRows, recordPromptLogits } from './prompt-logits.js';
import { prepareMasks } from './token-masks.js';

/** What a step's forward pass and sampling give `Scheduler.update`, and what it ended. */
export interface SampledStep {
  readonly seqIds: Int32Array;
  readonly tokenIds: Int32Array;
  readonly logprobs: Float64Array;
  /** Tokens forced after each sample (jump-forward), aligned with `seqIds`; absent: none. */
  readonly forcedTokenIds?: (readonly number[] | undefined)[];
  /** Requests a stop string ended a choice of in this step. */
  readonly stopped: ReadonlySet<LiveRequest>;
}

/** What {@link forwardAndSample} works with. */
export interface SampleStepContext {
  readonly runner: ModelRunner;
  readonly sampler: Sampler;
  /** The live requests by id; a sample row whose request is gone is skipped. */
  readonly live: ReadonlyMap<string, LiveRequest>;
  /** Called once the forward pass is queued, before sampling (the connectors' `afterForward`). */
  readonly afterForward: () => void;
  /** Ends a request whose sampling threw; its KV, written by the forward pass, is sound. */
  readonly sampleFailed: (requestId: string, error: unknown) => void;
  /** Jump-forward decoding; undefined: off. */
  readonly jumpForward?: JumpForward | undefined;
}

/**
 * Runs a plan's forward pass (with the prompt rows echo requests score, and the token masks of
 * constrained rows computed meanwhile), then samples every sample row and streams each token to
 * its request, with the tokens its constraint forces after it when jumping forward. A row whose sampling fails ends only its own request (token 0, which the
 * scheduler ignores for an ended request); a plan with no tokens samples nothing.
 */
export async function forwardAndSample(
  plan: BatchPlan,
  context: SampleStepContext,
): Promise<SampledStep> {
  const stopped = new Set<LiveRequest>();
  if (plan.numTokens === 0) {
    return {
      seqIds: new Int32Array(0),
      tokenIds: new Int32Array(0),
      logprobs: new Float64Array(0),
      stopped,
    };
  }
  const { runner, live } = context;
  const numSamples = plan.logitsIndices.length;
  const prompt = promptLogitRows(plan, live);
  const overlap = runner.forwardLeavesThread === true;
  const pendingMasks = overlap ? undefined : prepareMasks(plan, live);
  const forward = runner.forward(prompt ? { ...plan, logitsIndices: prompt.logitsIndices } : plan);
  const overlapped = overlap ? prepareMasks(plan, live, true) : undefined;
  const logits = await forward;
  const masks = await (pendingMasks ?? overlapped);
  context.afterForward();
  const vocab = runner.facts.vocabSize;
  if (prompt) recordPromptLogits(prompt, logits, numSamples, vocab);
  const tokenIds = new Int32Array(numSamples);
  const logprobs = new Float64Array(numSamples);
  const jump = context.jumpForward;
  let forcedTokenIds: (readonly number[] | undefined)[] | undefined;
  for (let i = 0; i < numSamples; i++) {
    const requestId = plan.rows[plan.sampleRows[i]!]!.requestId;
    const request = live.get(requestId);
    const row = logits.subarray(i * vocab, (i + 1) * vocab);
    if (!request) {
      // Aborted while the step ran: the scheduler ignores its sample.
      tokenIds[i] = 0;
      continue;
    }
    const index = plan.sampleIndices[i]!;
    try {
      const mask = masks?.[i];
      if (mask instanceof Error) throw mask;
      const result = request.sample(context.sampler, index, row, mask);
      tokenIds[i] = result.token;
      logprobs[i] = result.logprob ?? 0;
      if (request.emitToken(index, result.token, result.logprob ?? 0, result.topLogprobs)) {
        stopped.add(request);
      } else if (jump && mask) {
        const forced = request.forceTokens(index, jump.maxModelLen, jump.force);
        if (forced.tokenIds.length > 0) {
          forcedTokenIds ??= new Array<readonly number[] | undefined>(numSamples);
          forcedTokenIds[i] = forced.tokenIds;
        }
        if (forced.stopped) stopped.add(request);
      }
    } catch (error) {
      tokenIds[i] = 0;
      context.sampleFailed(requestId, error);
    }
  }
  return {
    seqIds: plan.sampleSeqIds,
    tokenIds,
    logprobs,
    ...(forcedTokenIds ? { forcedTokenIds } : {}),
    stopped,
  };
}
