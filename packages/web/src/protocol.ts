// The messages between the page's WebEngine and its worker (structured-clone data only).
import type { EngineSettings, KvSnapshot, PrefixOffloadStats } from '@kvasir/engine';
import type { OffloadStats } from '@kvasir/offload/portable';
import type {
  ChatMessage,
  EngineStats,
  FunctionTool,
  GenerationEvent,
  OutputConstraint,
  ToolCallFormatName,
} from '@kvasir/server/spec';
import type { BackendReport, WebBackendChoice } from './backend-choice.js';
import type { ErrorData } from './errors.js';
import type { KvTierReport } from './opfs-option.js';

/** Where the model's GGUF comes from. */
export type ModelSourceData =
  | { readonly kind: 'url'; readonly url: string }
  | { readonly kind: 'file'; readonly file: Blob; readonly name: string }
  | { readonly kind: 'bytes'; readonly bytes: ArrayBuffer; readonly name: string };

export interface InitMessage {
  readonly type: 'init';
  readonly model: ModelSourceData;
  readonly backend: WebBackendChoice;
  readonly threads?: number;
  readonly kvCacheBytes: number;
  readonly blockSize: number;
  readonly settings: Partial<EngineSettings>;
  /** Keep a downloaded model in Cache Storage (and look there first). */
  readonly cache: boolean;
  /** The OPFS KV tier: off, or its byte budget (the page's option, checked by the worker). */
  readonly opfs?: unknown;
}

/** Sampling and limits of one request, as the engine takes them. */
export interface GenerateParams {
  readonly n: number;
  readonly maxTokens: number;
  readonly temperature: number;
  readonly topP: number;
  readonly topK: number;
  readonly minP: number;
  readonly presencePenalty: number;
  readonly frequencyPenalty: number;
  readonly repetitionPenalty: number;
  readonly seed?: number;
  readonly stop: readonly string[];
  readonly logitBias?: Readonly<Record<number, number>>;
  readonly ignoreEos: boolean;
  readonly kvCompression?: { readonly policy: string; readonly [key: string]: unknown };
  /**
   * Structured output (`response_format`) or valid tool calls (`tools`), compiled and enforced
   * by the engine.
   */
  readonly constraint?: OutputConstraint;
}

export interface GenerateMessage {
  readonly type: 'generate';
  readonly id: string;
  readonly input:
    | {
        readonly kind: 'chat';
        readonly messages: readonly ChatMessage[];
        /** Listed by the chat template. */
        readonly tools?: readonly FunctionTool[];
      }
    | { readonly kind: 'completion'; readonly prompt: string | readonly number[] };
  readonly params: GenerateParams;
}

export type ToWorker =
  | InitMessage
  | GenerateMessage
  | { readonly type: 'abort'; readonly id: string }
  | { readonly type: 'stats'; readonly id: string }
  | { readonly type: 'kv-snapshot'; readonly id: string }
  | { readonly type: 'dispose'; readonly id: string };

/** The engine's statistics, with the steps it has run (continuous batching shows there). */
export interface WebEngineStats extends EngineStats {
  readonly steps: number;
  /** With the OPFS KV tier on: the store's counters, and the blocks written and imported. */
  readonly opfs?: { readonly store: OffloadStats; readonly prefix: PrefixOffloadStats };
}

/**
 * The paged KV cache at one moment (each block's reference count and prefix flag, each live
 * request's block table, by the ids the page's chunks carry) with the engine's statistics
 * read at the same moment.
 */
export interface WebKvSnapshot extends KvSnapshot {
  readonly stats: WebEngineStats;
}

/** The loaded model, as the page sees it. */
export interface ModelInfo {
  readonly id: string;
  readonly maxModelLen: number;
  readonly vocabSize: number;
  readonly numBlocks: number;
  readonly blockSize: number;
  /** Bytes of the GGUF, and whether they came from Cache Storage (no download). */
  readonly bytes: number;
  readonly fromCache: boolean;
  /**
   * How the model writes tool calls, read from its chat template (`hermes` for Qwen's,
   * `mistral`, `llama3_json`); absent when the template has none, and `tools` are refused.
   */
  readonly toolCallFormat?: ToolCallFormatName;
}

export type FromWorker =
  | {
      readonly type: 'progress';
      readonly phase: 'download' | 'load';
      readonly loaded: number;
      readonly total?: number;
    }
  | {
      readonly type: 'ready';
      readonly backend: BackendReport;
      readonly kvTier: KvTierReport;
      readonly model: ModelInfo;
    }
  | { readonly type: 'init-error'; readonly error: ErrorData }
  | { readonly type: 'started'; readonly id: string; readonly created: number }
  | { readonly type: 'event'; readonly id: string; readonly event: GenerationEvent }
  | { readonly type: 'end'; readonly id: string }
  | { readonly type: 'error'; readonly id: string; readonly error: ErrorData }
  | { readonly type: 'stats'; readonly id: string; readonly stats: WebEngineStats }
  | { readonly type: 'kv-snapshot'; readonly id: string; readonly snapshot: WebKvSnapshot }
  | { readonly type: 'disposed'; readonly id: string };
