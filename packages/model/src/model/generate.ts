import { ModelError } from '../errors.js';
import { type SamplingParams, SamplingState, sample } from '../sampling/sampler.js';
import type { Model } from './model.js';

/** Options of {@link generate}. */
export interface GenerateOptions {
  /** Tokens to generate at most (default 16). */
  readonly maxNewTokens?: number;
  /** Sampling (default greedy: temperature 0). */
  readonly sampling?: SamplingParams;
  /** Stop after producing one of these (it is included in the output). */
  readonly stopTokenIds?: readonly number[];
  /** First physical block to use (default 0): blocks `[firstBlock, firstBlock + n)` are taken. */
  readonly firstBlock?: number;
  /** Called with each new token as it is produced. */
  readonly onToken?: (token: number) => void;
}

/**
 * Generates from one prompt on its own tiny block table (no scheduler): one prefill step,
 * then one decode step per token. For tests, demos and `kvasir generate`.
 *
 * @returns the generated token ids.
 * @throws {ModelError} `INVALID_ARGUMENT` for an empty prompt or when the sequence needs more
 *   blocks than the cache has.
 */
export async function generate(
  model: Model,
  prompt: readonly number[],
  options: GenerateOptions = {},
): Promise<number[]> {
  const maxNew = options.maxNewTokens ?? 16;
  if (prompt.length === 0)
    throw new ModelError('INVALID_ARGUMENT', 'generate: the prompt is empty');
  const { blockSize, numBlocks } = model.kvCache;
  const first = options.firstBlock ?? 0;
  const total = prompt.length + maxNew;
  const blocks = Math.ceil(total / blockSize);
  if (first + blocks > numBlocks) {
    throw new ModelError(
      'INVALID_ARGUMENT',
      `generate: ${total} tokens need ${blocks} blocks from block ${first}, the cache has ${numBlocks}`,
    );
  }
  const blockTable = Array.from({ length: blocks }, (_, i) => first + i);
  const slot = (pos: number) =>
    (blockTable[Math.floor(pos / blockSize)] as number) * blockSize + (pos % blockSize);
  const params: SamplingParams = options.sampling ?? { temperature: 0 };
  const state = new SamplingState(params.seed, prompt);
  const stops = new Set(options.stopTokenIds ?? []);
  const out: number[] = [];
  let tokens = Int32Array.from(prompt);
  let start = 0;
  while (out.length < maxNew) {
    const n = tokens.length;
    const logits = await model.forward({
      tokenIds: tokens,
      positions: Int32Array.from({ length: n }, (_, i) => start + i),
      slotMapping: Int32Array.from({ length: n }, (_, i) => slot(start + i)),
      rows: [{ queryStart: 0, queryLen: n, contextLen: start + n, blockTable }],
      logitsIndices: Int32Array.of(n - 1),
    });
    const { token } = sample(logits, params, state);
    state.record(token);
    out.push(token);
    options.onToken?.(token);
    if (stops.has(token)) break;
    start += n;
    tokens = Int32Array.of(token);
  }
  return out;
}
