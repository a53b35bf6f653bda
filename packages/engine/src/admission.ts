import type { ExtraKeys } from '@kvasir/kv-allocator';
import { type KvCompressionSpec, SchedulerError, type SchedulerRequest } from '@kvasir/scheduler';
import { EngineError, type GenerationRequest } from '@kvasir/server/spec';
import type { ModelFacts } from './model-runner.js';
import { compressionLimitFor } from './plugins/kv-compression.js';

/** What a request is checked against before it is queued. */
export interface AdmissionLimits {
  readonly facts: ModelFacts;
  /** Requests waiting now. */
  readonly waiting: number;
  /** Most requests that may wait (`--max-waiting`). */
  readonly maxWaiting: number;
  /** The scheduler's context length. */
  readonly maxModelLen: number;
  /** Longest prompt of a request with KV compression (`--kv-compression-max-prompt-tokens`). */
  readonly kvCompressionMaxPromptTokens: number;
  /** Largest `max_tokens` of a request with KV compression (`--kv-compression-max-tokens`). */
  readonly kvCompressionMaxTokens: number;
}

/**
 * Checks a request, with the KV compression it resolved to, before it is queued, and returns the
 * token ids that end its choices (its own stop tokens, plus EOS unless ignored).
 * @throws EngineError `INVALID_REQUEST` for KV compression with echo and logprobs or one the
 *   model cannot run (its `kvCompressionLimits`), and what
 *   {@link admit} throws: a policy that drops blocks between prefill chunks streams any prompt,
 *   and only one in 'cache' positions may take a prompt past the context.
 */
export function admitRequest(
  request: GenerationRequest,
  kvCompression: KvCompressionSpec | undefined,
  limits: AdmissionLimits,
): Set<number> {
  if (kvCompression && request.echo && request.logprobs !== undefined) {
    // Prompt log-probabilities are placed by position, which a compressed cache renumbers;
    // `kvasir eval --kv-compression` scores a compressed context instead.
    throw new EngineError(
      'INVALID_REQUEST',
      'kv_compression: not supported with echo and logprobs (use kvasir eval --kv-compression to score a compressed context)',
      { details: { param: 'kv_compression' } },
    );
  }
  const limit = compressionLimitFor(kvCompression, limits.facts.kvCompressionLimits);
  if (limit) {
    throw new EngineError('INVALID_REQUEST', `kv_compression: ${limit}`, {
      details: { param: 'kv_compression' },
    });
  }
  const streams = kvCompression !== undefined && kvCompression.policy.attention !== 'prefill-end';
  return admit(
    request,
    limits.facts,
    limits,
    streams,
    kvCompression
      ? {
          maxPromptTokens: limits.kvCompressionMaxPromptTokens,
          maxTokens: limits.kvCompressionMaxTokens,
          maxModelLen:
            streams && kvCompression.positions === 'cache'
              ? Number.POSITIVE_INFINITY
              : limits.maxModelLen,
        }
      : undefined,
  );
}

/** The scheduler's request for an admitted one. */
export function schedulerRequest(
  request: GenerationRequest,
  stopTokens: ReadonlySet<number>,
  extraKeys: ExtraKeys,
  kvCompression: KvCompressionSpec | undefined,
): SchedulerRequest {
  return {
    id: request.id,
    promptTokenIds: request.promptTokens,
    // Scoring only (echo, max_tokens 0): one token is generated and never shown.
    maxTokens: Math.max(1, request.maxTokens),
    n: request.n,
    stopTokenIds: [...stopTokens],
    ignoreEos: request.ignoreEos,
    extraKeys,
    // Cached prefix tokens would have no logits: prompt log-probabilities need them all.
    ...(request.echo && request.logprobs !== undefined ? { skipPrefixCache: true } : {}),
    ...(kvCompression ? { kvCompression } : {}),
  };
}

/**
 * The error a client gets for a request `Scheduler.add` refused, in the client's words: the
 * scheduler names its own fields (`details.field`), the client sent `prompt` and
 * `kv_compression`. A server's compression plug-in that failed (its `maxBlocks`) is reported
 * to `onPolicyFailure` and is an `INTERNAL` error, not the client's. Any other error is returned
 * as it is.
 */
export function schedulerRefusal(
  error: unknown,
  request: GenerationRequest,
  maxModelLen: number,
  onPolicyFailure: (plugin: string, message: string) => void,
): unknown {
  if (!SchedulerError.isInstance(error)) return error;
  if (error.code === 'INVALID_POLICY') {
    onPolicyFailure(`kv-compression:${String(error.details?.policy)}`, error.message);
    return new EngineError('INTERNAL', `kv_compression: ${error.message}`, { cause: error });
  }
  const field = error.details?.field;
  if (field === 'promptTokenIds' && request.promptTokens.length > maxModelLen) {
    // A policy that keeps every prompt token until prefill ends (SnapKV) cannot run a prompt
    // past the context, whatever positions it uses.
    return new EngineError(
      'PROMPT_TOO_LONG',
      `prompt: ${request.promptTokens.length} tokens, over the model's context of ${maxModelLen}; this kv_compression policy needs the whole prompt in the cache`,
      { cause: error, details: { param: 'prompt' } },
    );
  }
  return typeof field === 'string' && field.startsWith('kvCompression')
    ? new EngineError(
        'INVALID_REQUEST',
        `kv_compression${field.slice('kvCompression'.length)}: ${error.message.slice(field.length + 2)}`,
        { cause: error, details: { param: 'kv_compression' } },
      )
    : new EngineError('INVALID_REQUEST', error.message, { cause: error });
}

/**
 * Bounds of a request with KV compression, whose cache no longer bounds its prompt (a policy
 * that streams it) or its generation (cache positions run past the context).
 */
export interface CompressedRequestLimits {
  /** Longest prompt (`--kv-compression-max-prompt-tokens`). */
  readonly maxPromptTokens: number;
  /** Largest `max_tokens` (`--kv-compression-max-tokens`). */
  readonly maxTokens: number;
  /** Longest prompt the policy can take: the context, unless it streams the prompt. */
  readonly maxModelLen: number;
}

/**
 * Checks a request against the model and the cache before it is queued, and returns the token
 * ids that end its choices (its own stop tokens, plus EOS unless ignored).
 * @throws EngineError `QUEUE_FULL` when `waiting` reached `maxWaiting`; `INVALID_REQUEST` for a
 *   prompt token id outside the vocabulary, or a compressed request's `max_tokens` over its
 *   bound; `PROMPT_TOO_LONG` for a prompt the cache can never hold (unless `streamsPrompt`: a
 *   compression policy that drops blocks between prefill chunks holds a bounded part of any
 *   prompt), and a compressed request's prompt over its bound or its `maxModelLen`.
 */
export function admit(
  request: GenerationRequest,
  facts: ModelFacts,
  queue: { readonly waiting: number; readonly maxWaiting: number },
  streamsPrompt = false,
  compressed?: CompressedRequestLimits,
): Set<number> {
  if (queue.waiting >= queue.maxWaiting) {
    throw new EngineError(
      'QUEUE_FULL',
      `the waiting queue is full (${queue.waiting} requests); retry later`,
      { details: { retryAfterSeconds: 1 } },
    );
  }
  const outside = request.promptTokens.findIndex(
    (id) => !Number.isInteger(id) || id < 0 || id >= facts.vocabSize,
  );
  if (outside >= 0) {
    throw new EngineError(
      'INVALID_REQUEST',
      `prompt: token ${outside} has id ${request.promptTokens[outside]}, outside the vocabulary [0, ${facts.vocabSize})`,
      { details: { param: 'prompt' } },
    );
  }
  const promptLen = request.promptTokens.length;
  if (compressed) {
    if (promptLen > compressed.maxPromptTokens) {
      throw new EngineError(
        'PROMPT_TOO_LONG',
        `prompt: ${promptLen} tokens; a request with kv_compression takes at most ${compressed.maxPromptTokens} (--kv-compression-max-prompt-tokens)`,
        { details: { param: 'prompt' } },
      );
    }
    if (promptLen > compressed.maxModelLen) {
      throw new EngineError(
        'PROMPT_TOO_LONG',
        `prompt: ${promptLen} tokens, over the context of ${compressed.maxModelLen} (only a kv_compression policy that drops blocks during prefill, in 'cache' positions, streams a longer prompt)`,
        { details: { param: 'prompt' } },
      );
    }
    if (request.maxTokens > compressed.maxTokens) {
      throw new EngineError(
        'INVALID_REQUEST',
        `max_tokens: ${request.maxTokens}; a request with kv_compression generates at most ${compressed.maxTokens} tokens (--kv-compression-max-tokens)`,
        { details: { param: 'max_tokens' } },
      );
    }
  }
  const promptBlocks = Math.ceil(promptLen / facts.kvLayout.blockSize);
  if (!streamsPrompt && promptBlocks > facts.numBlocks) {
    throw new EngineError(
      'PROMPT_TOO_LONG',
      `prompt: needs ${promptBlocks} KV blocks but the cache holds ${facts.numBlocks}`,
      { details: { param: 'prompt' } },
    );
  }
  const stopTokens = new Set<number>(request.stopTokenIds);
  if (!request.ignoreEos) for (const eos of facts.eosTokenIds) stopTokens.add(eos);
  return stopTokens;
}
