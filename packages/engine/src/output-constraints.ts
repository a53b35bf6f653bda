// Structured outputs in the engine: a request's constraint is compiled at admission (once per
// distinct constraint, against the model's vocabulary), each choice gets its own matcher, and the
// masks of a step's constrained rows are computed while its forward pass runs.
import {
  type ConstraintCompiler,
  ModelError,
  type TokenBitmask,
  type TokenMatcher,
  type TokenVocabulary,
  XGrammarCompiler,
} from '@kvasir/model';
import type { BatchPlan } from '@kvasir/scheduler';
import { type EngineCapabilities, EngineError, type GenerationRequest } from '@kvasir/server/spec';
import type { LiveRequest } from './live-request.js';
import type { ModelRunner } from './model-runner.js';

/** What a request's constraint and logit bias become at admission. */
export interface AdmittedConstraints {
  /** One matcher per choice, at the start of the output; empty without a constraint. */
  readonly matchers: readonly TokenMatcher[];
  /** The logit bias by token id; undefined without one. */
  readonly logitBias: ReadonlyMap<number, number> | undefined;
}

/** What the engine enforces: every constraint kind, on every backend, and logit bias. */
export const ENGINE_CAPABILITIES: EngineCapabilities = {
  outputConstraints: ['json_object', 'json_schema', 'grammar', 'regex', 'structural_tag'],
  logitBias: true,
};

const NONE: AdmittedConstraints = { matchers: [], logitBias: undefined };
const UTF8 = new TextEncoder();

/** Whether `piece` is `bytes` from `at` on. */
function spells(bytes: Uint8Array, at: number, piece: Uint8Array): boolean {
  if (at + piece.length > bytes.length) return false;
  for (let i = 0; i < piece.length; i++) if (bytes[at + i] !== piece[i]) return false;
  return true;
}

function invalid(param: string, message: string, cause?: unknown): EngineError {
  return new EngineError('INVALID_REQUEST', `${param}: ${message}`, {
    ...(cause === undefined ? {} : { cause }),
    details: { param },
  });
}

/**
 * Jump-forward decoding as the step loop uses it: the scheduler's `maxModelLen` (a forced run
 * stops where the scheduler would) and what finds the forced tokens.
 */
export interface JumpForward {
  readonly maxModelLen: number;
  /** {@link OutputConstraints.forcedTokens}. */
  force(matcher: TokenMatcher, room: number, stopTokens: ReadonlySet<number>): number[];
}

/**
 * Compiles requests' output constraints against the runner's vocabulary (the compiler is made on
 * the first constrained request, so unconstrained serving never loads XGrammar) and checks their
 * logit bias.
 */
export class OutputConstraints {
  readonly #runner: ModelRunner;
  #compiler: Promise<ConstraintCompiler> | undefined;
  #vocabulary: TokenVocabulary | undefined;

  /** Jump-forward decoding; undefined when it is off. */
  readonly jumpForward: JumpForward | undefined;

  /**
   * `jumpForward`: the scheduler, when forced text is to be appended at once (its `maxModelLen`
   * bounds a forced run); absent: jump-forward is off.
   */
  constructor(runner: ModelRunner, jumpForward?: { readonly maxModelLen: number }) {
    this.#runner = runner;
    this.jumpForward = jumpForward
      ? {
          maxModelLen: jumpForward.maxModelLen,
          force: (matcher, room, stopTokens) => this.forcedTokens(matcher, room, stopTokens),
        }
      : undefined;
  }

  /**
   * The matchers and logit bias of a request, before it is queued.
   *
   * @throws EngineError `INVALID_REQUEST` naming the field: a constraint that does not compile,
   *   with `ignoreEos` (a finished grammar allows only a stop token), or on a model whose
   *   tokenizer cannot spell its tokens; a logit bias for an id outside the vocabulary.
   */
  async admit(request: GenerationRequest): Promise<AdmittedConstraints> {
    const logitBias = this.#logitBias(request);
    const constraint = request.constraint;
    if (!constraint) return logitBias ? { matchers: [], logitBias } : NONE;
    const param = constraint.param ?? 'response_format';
    if (request.ignoreEos) {
      throw invalid(
        'ignore_eos',
        `not supported with ${param}: a complete output ends with a stop token`,
      );
    }
    let compiled: Awaited<ReturnType<ConstraintCompiler['compile']>>;
    try {
      compiled = await (await this.#compilerFor(param)).compile(constraint);
    } catch (error) {
      if (ModelError.isInstance(error) && error.code === 'INVALID_CONSTRAINT') {
        throw invalid(param, error.message, error);
      }
      throw error;
    }
    const matchers: TokenMatcher[] = [];
    try {
      for (let i = 0; i < request.n; i++) matchers.push(await compiled.createMatcher());
    } catch (error) {
      for (const m of matchers) m.dispose();
      throw error;
    }
    return { matchers, logitBias };
  }

  /** Releases the compiler (matchers already made stay usable). */
  async close(): Promise<void> {
    const compiler = this.#compiler;
    this.#compiler = undefined;
    (await compiler?.catch(() => undefined))?.dispose();
  }

  #compilerFor(param: string): Promise<ConstraintCompiler> {
    if (!this.#compiler) {
      const { codec, facts } = this.#runner;
      if (!codec.vocabulary) {
        return Promise.reject(invalid(param, "this model's tokenizer cannot constrain output"));
      }
      let vocabulary: ReturnType<NonNullable<typeof codec.vocabulary>>;
      try {
        vocabulary = codec.vocabulary({ size: facts.vocabSize, stopTokenIds: facts.eosTokenIds });
      } catch (error) {
        return Promise.reject(
          invalid(
            param,
            `this model's tokenizer cannot constrain output (${(error as Error).message})`,
            error,
          ),
        );
      }
      this.#vocabulary = vocabulary;
      const compiler: Promise<ConstraintCompiler> = XGrammarCompiler.create(vocabulary);
      this.#compiler = compiler;
      compiler.catch(() => {
        if (this.#compiler === compiler) this.#compiler = undefined;
      });
    }
    return this.#compiler;
  }

  /**
   * Jump-forward before the first token: the tokens a request's constraint forces at the start
   * of its output (a schema's `{"name": "`, a tool call's opening), accepted by every choice's
   * matcher (they all start alike), to be computed with the prompt's prefill and streamed
   * before the first sampled token. Empty when jump-forward is off, nothing is forced, or the
   * request asks for what forced tokens lack (log-probabilities, an echoed prompt); at least one
   * token is always left to sample, within `max_tokens` and `maxModelLen`.
   */
  forcedPrefix(
    request: GenerationRequest,
    admitted: AdmittedConstraints,
    stopTokens: ReadonlySet<number>,
  ): number[] {
    const jump = this.jumpForward;
    const [first, ...others] = admitted.matchers;
    if (!jump || !first || request.logprobs !== undefined || request.echo) return [];
    const room = Math.min(request.maxTokens, jump.maxModelLen - request.promptTokens.length) - 1;
    const ids = jump.force(first, room, stopTokens);
    for (const matcher of others) {
      for (const id of ids) {
        if (!matcher.accept(id)) throw new Error(`a fresh matcher refused forced token ${id}`);
      }
    }
    return ids;
  }

  /** {@link forcedTokens} over the runner's tokenizer and vocabulary. */
  forcedTokens(matcher: TokenMatcher, room: number, stopTokens: ReadonlySet<number>): number[] {
    const encode = this.#runner.codec.encodeText;
    const pieces = this.#vocabulary?.tokens;
    if (!encode || !pieces) return [];
    return forcedTokens(matcher, { room, stopTokens, encode, pieces });
  }

  #logitBias(request: GenerationRequest): ReadonlyMap<number, number> | undefined {
    const bias = request.sampling.logitBias;
    if (!bias) return undefined;
    const vocabSize = this.#runner.facts.vocabSize;
    const map = new Map<number, number>();
    for (const [key, value] of Object.entries(bias)) {
      const id = Number(key);
      if (!Number.isInteger(id) || id < 0 || id >= vocabSize) {
        throw invalid(
          'logit_bias',
          `token id ${key} is outside the vocabulary (0 to ${vocabSize - 1})`,
        );
      }
      if (!Number.isFinite(value))
        throw invalid('logit_bias', `the bias of token ${key} is not a finite number`);
      map.set(id, value);
    }
    return map.size > 0 ? map : undefined;
  }
}

/**
 * Jump-forward decoding: the tokens `matcher`'s constraint forces next, accepted by it, at most
 * `room` of them; empty when nothing is forced. The forced text is tokenized with the model's
 * tokenizer (`encode`, adding no special tokens) as it would be in the middle of a text (see
 * {@link textTokens}), and tokens are taken while each spells the next bytes of that text
 * (`pieces`: each token's bytes), is not a stop token (those end a choice: the model samples
 * them) and the matcher accepts it. Text the vocabulary cannot spell (a special token's text)
 * ends the jump there, and what follows is sampled as usual.
 */
export function forcedTokens(
  matcher: TokenMatcher,
  options: {
    readonly room: number;
    readonly stopTokens: ReadonlySet<number>;
    readonly encode: (text: string) => readonly number[];
    readonly pieces: TokenVocabulary['tokens'];
  },
): number[] {
  const { room, stopTokens, encode, pieces } = options;
  if (room <= 0 || matcher.isTerminated) return [];
  const text = matcher.forcedText();
  if (text === '') return [];
  const bytes = UTF8.encode(text);
  const taken: number[] = [];
  let at = 0;
  for (const id of textTokens(text, bytes, encode, pieces)) {
    if (taken.length >= room || stopTokens.has(id)) break;
    const piece = pieces[id];
    if (!piece || piece.length === 0 || !spells(bytes, at, piece)) break;
    if (!matcher.accept(id)) break;
    taken.push(id);
    at += piece.length;
  }
  return taken;
}

/** What {@link textTokens} puts before a text to learn how it is tokenized mid-text. */
const SEPARATOR = '\n';
const SEPARATOR_BYTE = 0x0a;

/**
 * `text`'s tokens as they are in the middle of a text. A SentencePiece tokenizer prefixes a
 * space to what it encodes (`add_space_prefix`: `{"` becomes `▁{"` or `▁`, `{`, `"`), which
 * the model writes only at the start of a text, and which the text forced here does not have.
 * Then `text` is encoded after a newline (which SentencePiece and byte-level BPE keep apart from
 * what follows), and the tokens after the newline's are `text`'s. When neither way spells the
 * text from its first byte, the first; the caller stops where the bytes part.
 */
function textTokens(
  text: string,
  bytes: Uint8Array,
  encode: (text: string) => readonly number[],
  pieces: TokenVocabulary['tokens'],
): readonly number[] {
  const plain = encode(text);
  const first = pieces[plain[0] ?? -1];
  if (!first || first.length === 0 || spells(bytes, 0, first)) return plain;
  const after = encode(SEPARATOR + text);
  for (let i = 0; i < after.length; i++) {
    const piece = pieces[after[i]!];
    if (!piece || piece.length === 0) return plain;
    // The separator's token ends in the newline, spelled by the bytes before it alone.
    if (piece[piece.length - 1] === SEPARATOR_BYTE) {
      const rest = after.slice(i + 1);
      const next = pieces[rest[0] ?? -1];
      return next && next.length > 0 && spells(bytes, 0, next) ? rest : plain;
    }
  }
  return plain;
}

/**
 * Starts computing the token masks of a plan's constrained sample rows; undefined when it has
 * none (unconstrained steps pay nothing). Called before the forward pass and awaited after it:
 * the matchers already hold every token sampled before this step, so the masks are those of
 * this step's rows, and on backends whose forward pass runs off the main thread (wasm workers,
 * the GPU) they cost no time. A row whose mask failed (its request ended meanwhile) gets the
 * error.
 */
export function prepareMasks(
  plan: BatchPlan,
  live: ReadonlyMap<string, LiveRequest>,
): Promise<(TokenBitmask | Error | undefined)[]> | undefined {
  let pending: Promise<TokenBitmask | Error | undefined>[] | undefined;
  const n = plan.logitsIndices.length;
  for (let i = 0; i < n; i++) {
    const request = live.get(plan.rows[plan.sampleRows[i]!]!.requestId);
    const mask = request?.nextTokenMask(plan.sampleIndices[i]!);
    if (!mask) continue;
    pending ??= Array.from({ length: n }, () => Promise.resolve(undefined));
    pending[i] = mask.catch((error: unknown) =>
      error instanceof Error ? error : new Error(String(error)),
    );
  }
  return pending && Promise.all(pending);
}
