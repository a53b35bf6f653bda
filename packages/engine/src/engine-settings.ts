import type { queuePolicies } from '@kvasir/scheduler';

/**
 * What the engine is told besides its model: batch limits, prefix caching, preemption, queue
 * policy and the limits on clients. The app's `EngineConfig` (a parsed `kvasir serve` config) is
 * one; {@link engineSettings} fills the defaults `kvasir serve` has for the rest.
 */
export interface EngineSettings {
  /** Name clients pass as `model`; default: the model's id. */
  readonly servedModelName?: string | undefined;
  /** Sequences one step may run. */
  readonly maxNumSeqs: number;
  /** Tokens one step may run (prefill chunks and decodes together). */
  readonly maxNumBatchedTokens: number;
  /** Context limit below the model's own; default: the model's. */
  readonly maxModelLen?: number | undefined;
  /** Requests allowed to wait before new ones are refused as too many. */
  readonly maxWaiting: number;
  /**
   * Events a streaming request may have sent and its client not read, per choice: past it the
   * client has stopped reading, and the engine ends the request (its blocks come back).
   */
  readonly maxUnreadEvents: number;
  readonly enableChunkedPrefill: boolean;
  readonly enablePrefixCaching: boolean;
  readonly preemptionMode: 'recompute' | 'swap';
  readonly queuePolicy: keyof typeof queuePolicies;
  /** Longest prompt a request with KV compression may send. */
  readonly kvCompressionMaxPromptTokens: number;
  /** Largest `max_tokens` of a request with KV compression. */
  readonly kvCompressionMaxTokens: number;
  /**
   * Write full KV blocks to the offload tiers and import prompts' prefixes from them. Default:
   * on when a tier is given, except swap preemption with a single tier.
   */
  readonly offloadPrefix?: boolean | undefined;
  /**
   * Jump-forward decoding: the text an output constraint forces after a sampled token is
   * appended at once and computed next step as one chunk.
   */
  readonly jumpForward: boolean;
  /** The host tier's budget in bytes, and the swap slots (default: what that budget holds). */
  readonly offload: { readonly hostBytes: number; readonly swapBlocks?: number | undefined };
}

/** The defaults of `kvasir serve`. */
export const DEFAULT_ENGINE_SETTINGS: EngineSettings = {
  maxNumSeqs: 64,
  maxNumBatchedTokens: 512,
  maxWaiting: 256,
  maxUnreadEvents: 1024,
  enableChunkedPrefill: true,
  enablePrefixCaching: true,
  preemptionMode: 'recompute',
  queuePolicy: 'fcfs',
  kvCompressionMaxPromptTokens: 32_768,
  kvCompressionMaxTokens: 32_768,
  jumpForward: true,
  offload: { hostBytes: 256 * 1024 * 1024 },
};

/** Settings with `kvasir serve`'s defaults for whatever `input` leaves out. */
export function engineSettings(input: Partial<EngineSettings> = {}): EngineSettings {
  return { ...DEFAULT_ENGINE_SETTINGS, ...input };
}
