/**
 * The contract between the HTTP layer and whatever runs the model (`InferenceEngine`, version
 * `v1`). `@kvasir/server` knows only this interface; `apps/kvasir` implements it over the
 * scheduler, the model and the KV cache.
 */
import type { EngineHealth, EngineStats } from './engine-stats.js';
import { EngineError } from './errors.js';
import type { GenerationStream } from './generation-events.js';

/** The version of the {@link InferenceEngine} contract this package implements. */
export const INFERENCE_ENGINE_SPECIFICATION_VERSION = 'v1';

/** A model the engine serves, as listed by `GET /v1/models`. */
export interface ModelCard {
  /** The id clients pass as `model`. */
  readonly id: string;
  /** Unix seconds when the model was loaded. */
  readonly created: number;
  /** Shown as `owned_by`. */
  readonly ownedBy: string;
  /** Longest context (prompt + generated tokens) a request may use. */
  readonly maxModelLen: number;
  /**
   * Token ids are `0 ≤ id < vocabSize`; when set, the server refuses prompts given as token ids
   * outside it (400) before they reach the engine.
   */
  readonly vocabSize?: number;
  /**
   * The most UTF-8 bytes of prompt text one token stands for, when the tokenizer bounds it (its
   * longest token, widened by what its normalizer can shrink). When set, the server refuses a
   * text prompt of more than `(maxModelLen - 1) × maxTextBytesPerToken` bytes with 413 before
   * tokenizing it: it cannot fit the context whatever its tokens.
   */
  readonly maxTextBytesPerToken?: number;
  /**
   * True when requests of this model may run past {@link maxModelLen} because the engine
   * compresses their KV cache by default (a server-wide policy that positions tokens by their
   * place in the cache). A request that names its own `kvCompression` may do so regardless.
   */
  readonly unboundedContext?: boolean;
  /**
   * How this model writes tool calls (from the chat template it ships; see
   * {@link ToolCallFormatName}); absent when its template has no tool-call format, and then
   * requests with `tools` are refused (400).
   */
  readonly toolCallFormat?: ToolCallFormatName;
}

/**
 * A model family's tool-call syntax: `hermes` (Hermes, Qwen 2.5+: `<tool_call>\n{"name": …,
 * "arguments": …}\n</tool_call>`), `llama3_json` (Llama 3.1+: `{"name": …, "parameters": …}`),
 * `mistral` (`[TOOL_CALLS][{"name": …, "arguments": …}, …]`).
 */
export type ToolCallFormatName = 'hermes' | 'llama3_json' | 'mistral';

/** A tool the model may call (OpenAI's `tools[i]`), as the chat template receives it. */
export interface FunctionTool {
  readonly type: 'function';
  readonly function: {
    readonly name: string;
    readonly description?: string;
    /** A JSON Schema of the arguments object; absent means any object. */
    readonly parameters?: Readonly<Record<string, unknown>>;
    readonly strict?: boolean;
  };
}

/** One call an assistant message made (OpenAI's `tool_calls[i]`, arguments as JSON text). */
export interface ChatToolCall {
  readonly id: string;
  readonly name: string;
  /** The arguments as JSON text, as the model wrote them. */
  readonly arguments: string;
}

/**
 * A request's token-level KV compression, as the client sent it (`kv_compression`): a policy
 * name and its parameters. The engine checks both and refuses what it does not know with
 * `INVALID_REQUEST`. With `positions` other than `original`, a request may run past the
 * model's context (the cache stays bounded).
 */
export interface KvCompressionRequest {
  readonly policy: string;
  readonly [param: string]: string | number;
}

/** One chat message after the server normalized its content to plain text. */
export interface ChatMessage {
  readonly role: 'system' | 'developer' | 'user' | 'assistant' | 'tool';
  readonly content: string;
  readonly name?: string;
  /** An assistant message's tool calls. */
  readonly toolCalls?: readonly ChatToolCall[];
  /** A `tool` message: the id of the call it answers. */
  readonly toolCallId?: string;
}

/** What a chat template renders besides the messages. */
export interface ChatTemplateOptions {
  /** The tools the model may call, for templates that list them in the prompt. */
  readonly tools?: readonly FunctionTool[];
}

/** Sampling parameters as the engine receives them (already validated and defaulted). */
export interface SamplingParams {
  /** 0 means greedy. */
  readonly temperature: number;
  /** 1 disables nucleus sampling. */
  readonly topP: number;
  /** 0 (or -1 on the wire) disables top-k. */
  readonly topK: number;
  /** 0 disables min-p. */
  readonly minP: number;
  readonly presencePenalty: number;
  readonly frequencyPenalty: number;
  /** 1 disables the repetition penalty. */
  readonly repetitionPenalty: number;
  /** Per-request seed: same seed, same prompt, same parameters → same output. */
  readonly seed?: number;
  /**
   * Added to the logits of these token ids before sampling (OpenAI's `logit_bias`, -100 to 100).
   * An engine refuses ids outside its vocabulary with `INVALID_REQUEST` (`param: logit_bias`).
   */
  readonly logitBias?: Readonly<Record<number, number>>;
}

/**
 * A structural tag (XGrammar's format, as vLLM and SGLang pass it): literal text, JSON of a
 * schema, any text, a tag (`begin`, content, `end`), tags with a separator, tags triggered in
 * free text (the tag whose `begin` starts with a trigger is constrained from there), or a
 * sequence. Tool calls are written with these.
 */
export type StructuralFormat =
  | { readonly type: 'const_string'; readonly value: string }
  | { readonly type: 'json_schema'; readonly json_schema: unknown }
  | { readonly type: 'any_text' }
  | { readonly type: 'sequence'; readonly elements: readonly StructuralFormat[] }
  | StructuralTagFormat
  | {
      readonly type: 'tags_with_separator';
      readonly tags: readonly StructuralTagFormat[];
      readonly separator: string;
      readonly at_least_one?: boolean;
      readonly stop_after_first?: boolean;
    }
  | {
      readonly type: 'triggered_tags';
      readonly triggers: readonly string[];
      readonly tags: readonly StructuralTagFormat[];
      readonly at_least_one?: boolean;
      readonly stop_after_first?: boolean;
    };

/** One tag of a {@link StructuralFormat}: `begin`, then its content, then `end`. */
export interface StructuralTagFormat {
  readonly type: 'tag';
  readonly begin: string;
  readonly content: StructuralFormat;
  readonly end: string;
}

/**
 * What every choice's output must match (structured outputs), enforced token by token:
 * `json_object` any JSON object, `json_schema` JSON valid against `schema`, `grammar` a GBNF /
 * EBNF grammar (rule `root` first), `regex` text matching `pattern` in full, `structural_tag`
 * text shaped by a {@link StructuralFormat} (tool calls). An engine compiles it before any
 * decoding and refuses one it cannot compile with `INVALID_REQUEST` naming {@link param}; a
 * constrained choice that reaches `maxTokens` ends with `length`.
 */
export type OutputConstraint = (
  | { readonly kind: 'json_object' }
  | { readonly kind: 'json_schema'; readonly schema: unknown }
  | { readonly kind: 'grammar'; readonly grammar: string }
  | { readonly kind: 'regex'; readonly pattern: string }
  | { readonly kind: 'structural_tag'; readonly format: StructuralFormat }
) & {
  /** The request field it came from, named in errors; default `response_format`. */
  readonly param?: string;
};

/** What the server asks the engine to generate. */
export interface GenerationRequest {
  /** Unique id (also the response id), for logs and aborts. */
  readonly id: string;
  readonly model: string;
  /** The prompt as token ids (after the chat template for chat requests). */
  readonly promptTokens: readonly number[];
  /** Number of independent choices (parallel sampling); they share the prompt's KV blocks. */
  readonly n: number;
  /**
   * Maximum tokens to generate per choice: at least 1, or 0 with {@link echo} (score the
   * prompt only: every choice ends with `length` and no token).
   */
  readonly maxTokens: number;
  readonly sampling: SamplingParams;
  /**
   * How many alternatives to return per token besides the chosen one; `undefined` means no
   * log-probabilities at all, 0 means only the chosen token's.
   */
  readonly logprobs?: number;
  /** Extra token ids that end a choice (the engine's EOS tokens apply regardless). */
  readonly stopTokenIds: readonly number[];
  /**
   * Strings that end a choice (finish reason `stop`) where one first completes in its text;
   * among those completing at the same place the longest wins. The engine never sends a stop
   * string nor anything after it: it holds back text that could still begin one (a stop string
   * may straddle tokens) and releases it when the choice ends otherwise. Empty strings are
   * ignored; none when absent.
   */
  readonly stopStrings?: readonly string[];
  /** When true, EOS does not end a choice (for benchmarks). */
  readonly ignoreEos: boolean;
  /**
   * Return the prompt as well (OpenAI's legacy `echo`): the stream yields one
   * {@link PromptEvent} before any delta, with the prompt's log-probabilities when
   * {@link logprobs} is set. An engine computes those over every prompt token (no prefix-cache
   * reuse for such a request). Engines that cannot reject the request with an `EngineError`
   * `INVALID_REQUEST`; an engine that ignores the field fails the request in the server (500).
   */
  readonly echo?: boolean;
  /** Token-level KV compression for this request (Kvasir's extension); the engine's default when absent. */
  readonly kvCompression?: KvCompressionRequest;
  /** Structured output: what every choice must match (see {@link OutputConstraint}). */
  readonly constraint?: OutputConstraint;
}

/** The kinds of {@link OutputConstraint}. */
export type OutputConstraintKind = OutputConstraint['kind'];

/**
 * Optional request fields an engine implements. The server refuses a request that needs one the
 * engine does not declare (400 naming the field) rather than let it run unconstrained.
 */
export interface EngineCapabilities {
  /** The {@link OutputConstraint} kinds it enforces (`tools` need `structural_tag`). */
  readonly outputConstraints?: readonly OutputConstraintKind[];
  /** Whether it applies {@link SamplingParams.logitBias}. */
  readonly logitBias?: boolean;
}

/**
 * What the server needs from an inference engine. Write one with {@link defineInferenceEngine}
 * (a class declares `readonly specificationVersion = 'v1'`); `createServer` checks it with
 * {@link validateInferenceEngine}.
 *
 * Contract (`v1`): admission errors (queue full, prompt too long) reject `generate` with an
 * {@link EngineError}; errors after admission end the stream by throwing from the iterator.
 * The engine applies stop tokens, stop strings and limits, and places each token's
 * log-probability in the text it sends; aborting the request's signal must end its stream and
 * free its resources.
 */
export interface InferenceEngine {
  /** The contract version the engine was written against; `'v1'`. */
  readonly specificationVersion: typeof INFERENCE_ENGINE_SPECIFICATION_VERSION;
  /**
   * Optional request fields the engine implements (structured outputs, tools, logit bias); none
   * when absent.
   */
  readonly capabilities?: EngineCapabilities;
  /** The served models; the first is the default. */
  listModels(): readonly ModelCard[];
  /**
   * Tokenizes a completion prompt.
   * @throws EngineError for input the tokenizer rejects.
   */
  tokenize(model: string, text: string): Promise<readonly number[]> | readonly number[];
  /**
   * Applies the model's chat template (with the generation prompt, and the tools when given) and
   * tokenizes the result.
   * @throws EngineError for a conversation the template rejects.
   */
  applyChatTemplate(
    model: string,
    messages: readonly ChatMessage[],
    options?: ChatTemplateOptions,
  ): Promise<readonly number[]> | readonly number[];
  /**
   * Admits a request and starts generating. Resolves once admitted; the stream yields deltas
   * for every choice, then one usage event. Aborting `signal` stops every choice and frees the
   * request's KV blocks; the stream then ends (finish reason `abort`) or throws an AbortError.
   * @throws EngineError `QUEUE_FULL` (→ 429), `PROMPT_TOO_LONG` (→ 413), `DRAINING` (→ 503).
   */
  generate(request: GenerationRequest, signal: AbortSignal): Promise<GenerationStream>;
  /** Current statistics, read on every `/metrics` scrape. */
  stats(): EngineStats;
  /** Current health, read on `/health` and before admitting each request. */
  health(): EngineHealth;
}

/** The methods of an {@link InferenceEngine}, as {@link defineInferenceEngine} takes them. */
export type InferenceEngineMethods = Omit<InferenceEngine, 'specificationVersion'>;

const ENGINE_METHODS = [
  'listModels',
  'tokenize',
  'applyChatTemplate',
  'generate',
  'stats',
  'health',
] as const satisfies readonly (keyof InferenceEngineMethods)[];

/**
 * Makes an {@link InferenceEngine} from its methods (a plain object), stamped with the contract
 * version. A class implements the interface instead and declares the version as a field.
 *
 * @example
 * ```ts
 * const engine = defineInferenceEngine({
 *   listModels: () => [{ id: 'echo', created: 0, ownedBy: 'me', maxModelLen: 256 }],
 *   tokenize: (_model, text) => [...text].map((c) => c.charCodeAt(0)),
 *   applyChatTemplate: (_model, messages) => [...messages.map((m) => m.content).join('\n')].map((c) => c.charCodeAt(0)),
 *   async generate(request) { ... },
 *   stats: () => myStats(),
 *   health: () => ({ status: 'ok' }),
 * });
 * ```
 * @throws {EngineError} INVALID_ENGINE naming a missing method.
 */
export function defineInferenceEngine(methods: InferenceEngineMethods): InferenceEngine {
  return validateInferenceEngine({
    ...methods,
    specificationVersion: INFERENCE_ENGINE_SPECIFICATION_VERSION,
  });
}

/**
 * Checks that `value` is an {@link InferenceEngine} of a version this package implements and
 * returns it typed. Methods may live on a prototype (a class instance).
 * @throws {EngineError} INVALID_ENGINE naming what is missing or the unsupported version.
 */
export function validateInferenceEngine(value: unknown): InferenceEngine {
  if (typeof value !== 'object' || value === null) {
    throw new EngineError('INVALID_ENGINE', 'an inference engine must be an object');
  }
  const v = value as Record<string, unknown>;
  if (v.specificationVersion !== INFERENCE_ENGINE_SPECIFICATION_VERSION) {
    throw new EngineError(
      'INVALID_ENGINE',
      v.specificationVersion === undefined
        ? `inference engine has no specificationVersion: make it with defineInferenceEngine() (or declare specificationVersion: '${INFERENCE_ENGINE_SPECIFICATION_VERSION}')`
        : `inference engine specificationVersion ${JSON.stringify(v.specificationVersion)} is not supported (this version implements '${INFERENCE_ENGINE_SPECIFICATION_VERSION}')`,
      { details: { specificationVersion: v.specificationVersion } },
    );
  }
  const caps = v.capabilities as Record<string, unknown> | undefined;
  if (
    caps !== undefined &&
    (typeof caps !== 'object' ||
      caps === null ||
      (caps.outputConstraints !== undefined && !Array.isArray(caps.outputConstraints)) ||
      (caps.logitBias !== undefined && typeof caps.logitBias !== 'boolean'))
  ) {
    throw new EngineError(
      'INVALID_ENGINE',
      'inference engine capabilities must be { outputConstraints?: string[]; logitBias?: boolean }',
      { details: { capabilities: caps } },
    );
  }
  for (const method of ENGINE_METHODS) {
    if (typeof v[method] !== 'function') {
      throw new EngineError(
        'INVALID_ENGINE',
        `inference engine is missing the method "${method}" (needs ${ENGINE_METHODS.join(', ')})`,
        { details: { method } },
      );
    }
  }
  return value as InferenceEngine;
}
