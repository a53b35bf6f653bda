import { performance } from 'node:perf_hooks';
import type { ModelRunner } from '@kvasir/engine';
import { createScheduler } from '@kvasir/engine';
import { KvCacheManager } from '@kvasir/kv-allocator';
import type { BatchPlan, KvCompressionSpec } from '@kvasir/scheduler';
import type { EngineConfig } from '../config.js';
import { KvasirAppError } from '../errors.js';

/** What one streaming evaluation measured besides the scored logits. */
export interface StreamingEvalStats {
  /** Tokens prefilled in chunks before the token-by-token part. */
  readonly promptTokens: number;
  /** Most KV blocks the sequence held at once, and the bytes they take. */
  readonly maxBlocksHeld: number;
  readonly maxKvBytesHeld: number;
  /** Tokens the policy dropped from the cache over the run. */
  readonly tokensDropped: number;
  /** Teacher-forced decode steps per second (one token each). */
  readonly decodeTokensPerSecond: number;
}

/**
 * Scores a whole text as ONE sequence through the engine's own scheduler, allocator and
 * compression policy, the way a user's long generation would run: the first `promptTokens`
 * tokens as a prompt (prefilled in chunks of `chunk` tokens, the policy applied between chunks
 * and, for SnapKV, at the prompt's end), then every later token fed back as if the model had
 * sampled it (teacher forcing), one decode step each, as StreamingLLM evaluates (with no
 * `spec`, the whole cache is kept: the reference, for a text within the context). `onLogits`
 * receives, in text order, the logits of position `p` (which score token `p + 1`), for
 * `p` from 0 to the text's second-to-last token.
 * @throws KvasirAppError `INVALID_CONFIG` when the policy refuses the text (a prompt its
 *   positions cannot hold) or the cache it needs does not fit.
 */
export async function streamingEval(
  runner: ModelRunner,
  config: EngineConfig,
  ids: readonly number[],
  spec: KvCompressionSpec | undefined,
  options: { readonly promptTokens: number; readonly chunk: number },
  onLogits: (position: number, logits: Float32Array) => void,
): Promise<StreamingEvalStats> {
  const { facts } = runner;
  const vocab = facts.vocabSize;
  const blockSize = facts.kvLayout.blockSize;
  const promptLen = Math.min(options.promptTokens, ids.length);
  const kvCache = new KvCacheManager({
    numBlocks: facts.numBlocks,
    blockSize,
    enablePrefixCaching: false,
  });
  const scheduler = createScheduler(
    { ...config, maxNumBatchedTokens: options.chunk, enableChunkedPrefill: true, maxNumSeqs: 1 },
    kvCache,
    facts,
    undefined,
  );
  try {
    scheduler.add({
      id: 'eval',
      promptTokenIds: ids.slice(0, promptLen),
      maxTokens: Math.max(1, ids.length - promptLen),
      ignoreEos: true,
      skipPrefixCache: true,
      ...(spec ? { kvCompression: spec } : {}),
    });
  } catch (error) {
    throw new KvasirAppError('INVALID_CONFIG', `--kv-compression: ${(error as Error).message}`, {
      cause: error,
    });
  }
  // Text position whose logits come next: prompt rows first, then one per decode step.
  let position = 0;
  let maxBlocks = 0;
  let decodeSteps = 0;
  let decodeSeconds = 0;
  for (;;) {
    const plan: BatchPlan = scheduler.schedule();
    if (plan.rows.length === 0) {
      const m = scheduler.metrics();
      if (m.numWaiting + m.numRunning === 0) break;
      throw new KvasirAppError(
        'INVALID_CONFIG',
        `the cache of ${facts.numBlocks} blocks cannot hold the sequence${spec ? ` under ${spec.policy.name}` : ''}`,
      );
    }
    const row = plan.rows[0]!;
    const isDecode = position >= promptLen;
    // A prompt chunk scores every position it computes (the prompt's last one is also the
    // plan's sample, so it comes last); a decode row's one sample is its position.
    const extra: number[] = [];
    if (!isDecode) {
      const sampled = plan.logitsIndices.length > 0 ? 1 : 0;
      for (let i = 0; i < row.queryLen - sampled; i++) extra.push(row.queryStart + i);
    }
    const logitsIndices = Int32Array.from([...extra, ...plan.logitsIndices]);
    if (plan.copies.length > 0) await runner.copyBlocks(plan.copies);
    const t0 = performance.now();
    const logits = await runner.forward({ ...plan, logitsIndices });
    if (isDecode) {
      decodeSeconds += (performance.now() - t0) / 1000;
      decodeSteps++;
    }
    for (let k = 0; k < logitsIndices.length; k++) {
      if (position < ids.length - 1) {
        onLogits(position, logits.subarray(k * vocab, (k + 1) * vocab));
      }
      position++;
    }
    maxBlocks = Math.max(maxBlocks, kvCache.stats().usedBlocks);
    // Teacher forcing: the "sampled" token is the text's next one.
    const fed = plan.logitsIndices.length > 0 ? ids[position] : undefined;
    const outputs = scheduler.update(
      fed === undefined ? { seqIds: [], tokenIds: [] } : { seqIds: [row.seqId], tokenIds: [fed] },
    );
    if (outputs.length > 0 || position >= ids.length - 1) break;
  }
  scheduler.abort('eval');
  const m = scheduler.metrics();
  return {
    promptTokens: promptLen,
    maxBlocksHeld: maxBlocks,
    maxKvBytesHeld: maxBlocks * facts.blockBytes,
    tokensDropped: Object.values(m.kvCompression).reduce((sum, p) => sum + p.tokensDropped, 0),
    decodeTokensPerSecond: decodeSteps / Math.max(decodeSeconds, 1e-9),
  };
}
