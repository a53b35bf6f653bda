// Structured outputs in the engine: a request's constraint is compiled at admission (once per
// distinct constraint, against the model's vocabulary), each choice gets its own matcher
// (the masks of a step: token-masks.ts; jump-forward's tokens: forced-tokens.ts).
import {
  type ConstraintCompiler,
  ModelError,
  type TokenMatcher,
  type TokenVocabulary,
  XGrammarCompiler,
  type XGrammarInstance,
} from '@kvasir/model';
import { type EngineCapabilities, EngineError, type GenerationRequest } from '@kvasir/server/spec';
import { forcedTokens } from './forced-tokens.js';
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
  readonly #loadXGrammar: (() => XGrammarInstance) | undefined;

  /** Jump-forward decoding; undefined when it is off. */
  readonly jumpForward: JumpForward | undefined;

  /**
   * `jumpForward`: the scheduler, when forced text is to be appended at once (its `maxModelLen`
   * bounds a forced run); absent: jump-forward is off. `loadXGrammar`: where XGrammar instances
   * come from (default: `@mlc-ai/web-xgrammar` from Node's `node_modules`).
   */
  constructor(
    runner: ModelRunner,
    jumpForward?: { readonly maxModelLen: number },
    loadXGrammar?: () => XGrammarInstance,
  ) {
    this.#runner = runner;
    this.#loadXGrammar = loadXGrammar;
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
      const compiler: Promise<ConstraintCompiler> = XGrammarCompiler.create(
        vocabulary,
        this.#loadXGrammar ? { load: this.#loadXGrammar } : {},
      );
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
