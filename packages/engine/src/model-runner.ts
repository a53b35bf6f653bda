import type { BlockCopy, KvLayout } from '@kvasir/kv-allocator';
import type { TokenVocabulary } from '@kvasir/model';
import type { BatchPlan } from '@kvasir/scheduler';
import type { ChatMessage, ChatTemplateOptions, ToolCallFormatName } from '@kvasir/server/spec';

/** Turns token ids back into text while streaming, never splitting a multi-byte character. */
export interface IncrementalDecoder {
  /** Adds one token; returns the text that became complete (may be empty). */
  push(tokenId: number): string;
  /** Text still held back (an incomplete character) at the end of generation. */
  flush(): string;
}

/** The tokenizer side of a loaded model. */
export interface TextCodec {
  /** Tokenizes a completion prompt (with BOS where the model expects it). */
  encode(text: string): number[];
  /**
   * Tokenizes text an output goes on with, adding no special tokens: the text a grammar forces
   * (jump-forward decoding). Absent: forced text is sampled token by token.
   */
  encodeText?(text: string): number[];
  /** Renders the chat template with the generation prompt (and the tools) and tokenizes it. */
  applyChatTemplate(messages: readonly ChatMessage[], options?: ChatTemplateOptions): number[];
  /** How the chat template has the model write tool calls; undefined when it has no tools. */
  readonly toolCallFormat?: ToolCallFormatName;
  /**
   * The most UTF-8 bytes of text one token stands for, when the tokenizer bounds it: a prompt of
   * more than the context times this is refused without being tokenized.
   */
  readonly maxTextBytesPerToken?: number;
  /**
   * Tokenizes off the event loop (a worker thread, one text at a time), with the results of
   * `encode` (`addSpecialTokens`) or of `applyChatTemplate` (`renderChat`, then no special
   * tokens): for long texts, which take seconds. Absent: the engine calls the others.
   */
  encodeOffThread?(text: string, addSpecialTokens: boolean): Promise<number[]>;
  /** Renders the chat template with the generation prompt (and the tools), without tokenizing. */
  renderChat?(messages: readonly ChatMessage[], options?: ChatTemplateOptions): string;
  /** Stops what the codec started (its worker thread). */
  close?(): Promise<void>;
  /** A fresh incremental decoder for one output sequence. */
  decoder(): IncrementalDecoder;
  /** The text of a single token, for log-probabilities. */
  tokenText(tokenId: number): string;
  /**
   * The bytes each token id stands for, over a logits row of `size` ids, for grammar-constrained
   * decoding; absent when the tokenizer cannot tell (constrained requests are then refused).
   */
  vocabulary?(options: { size: number; stopTokenIds: readonly number[] }): TokenVocabulary;
}

/** Facts about the loaded model the engine needs. */
export interface ModelFacts {
  readonly modelId: string;
  readonly vocabSize: number;
  readonly maxModelLen: number;
  readonly eosTokenIds: readonly number[];
  /** KV layout (block size included) of the paged cache the runner owns. */
  readonly kvLayout: KvLayout;
  /** Bytes of one physical block over all layers (what swap and offload move). */
  readonly blockBytes: number;
  /** Physical blocks in the runner's cache. */
  readonly numBlocks: number;
  /** Bytes of the weights as resident on the device. */
  readonly weightBytes: number;
  /** Digest of the weights, for offload namespaces. */
  readonly weightDigest: string;
  /** Backend description for banners and `kvasir info`. */
  readonly backend: string;
  /** KV compression the model cannot run correctly (absent: every policy runs). */
  readonly kvCompressionLimits?: KvCompressionLimits;
  /**
   * The windows of the cache's KV groups (null: full attention), group 0 first, when the
   * runner's cache has several (`@kvasir/model`'s `kvGroups`): sliding-window layers hold only
   * their window. Absent: one group of every layer.
   */
  readonly kvGroups?: readonly (number | null)[];
}

/**
 * KV compression a model cannot run correctly, each with the reason a request is refused for:
 * policies in original positions, and policies that read attention mass.
 */
export interface KvCompressionLimits {
  readonly originalPositions?: string;
  readonly attentionMass?: string;
  /** Every policy (a cache of several KV groups: blocks cannot be dropped from one table). */
  readonly any?: string;
}

/**
 * The executor the engine loop drives: one forward pass per batch plan over a paged KV cache it
 * owns, plus the block moves that copy-on-write and swap need.
 */
export interface ModelRunner {
  readonly facts: ModelFacts;
  readonly codec: TextCodec;
  /**
   * Runs the plan (KV written into its slots) and returns the logits of every sample of
   * `plan.logitsIndices`, row after row (`numSamples × vocabSize`).
   */
  forward(plan: BatchPlan): Promise<Float32Array>;
  /**
   * True when {@link forward} leaves this thread idle while it waits for a device (a GPU):
   * the engine then computes the step's token masks during that wait. Absent or false: the
   * forward pass runs on this thread (the CPU backend; wasm, whose thread 0 is this one), and
   * the masks are computed before it, with nothing to overlap.
   */
  readonly forwardLeavesThread?: boolean;
  /** Copies whole blocks (copy-on-write), in order. */
  copyBlocks(copies: readonly BlockCopy[]): Promise<void>;
  /** Reads blocks' bytes (all layers) for swap-out and offload. */
  readBlocks(blocks: readonly number[]): Promise<Uint8Array[]>;
  /** Writes blocks' bytes back (swap-in). */
  writeBlocks(blocks: readonly number[], data: readonly Uint8Array[]): Promise<void>;
  /** Releases the device. */
  dispose(): Promise<void>;
}
