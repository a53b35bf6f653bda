// The token-mask contract: what a request's output must match, compiled once per vocabulary,
// and a matcher per sequence that says which tokens may come next.
import { ModelError } from '../errors.js';

/**
 * What a sequence's output must match.
 *
 * - `json_object`: any JSON object.
 * - `json_schema`: JSON that validates against `schema` (a JSON Schema object). Properties come
 *   out in the schema's order; properties the schema does not name are not generated.
 * - `grammar`: a GBNF / EBNF grammar (llama.cpp's GBNF is accepted as it is), rule `root` first.
 * - `regex`: text matching `pattern` in full.
 * - `structural_tag`: text shaped by a {@link StructuralFormat} (XGrammar's structural tags):
 *   how tool calls are constrained, in free text from their opening tag on or alone.
 */
export type OutputConstraint =
  | { readonly kind: 'json_object' }
  | { readonly kind: 'json_schema'; readonly schema: unknown }
  | { readonly kind: 'grammar'; readonly grammar: string }
  | { readonly kind: 'regex'; readonly pattern: string }
  | { readonly kind: 'structural_tag'; readonly format: StructuralFormat };

/**
 * XGrammar's structural-tag formats: literal text, JSON of a schema (spaced as the compiler's
 * JSON is), any text, a sequence, a tag (`begin`, content, `end`), tags with a separator, and
 * tags triggered in free text (once a trigger appears, the tag whose `begin` starts with it is
 * enforced to its `end`).
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

/** One tag of a {@link StructuralFormat}. */
export type StructuralTagFormat = {
  readonly type: 'tag';
  readonly begin: string;
  readonly content: StructuralFormat;
  readonly end: string;
};

/** The kinds of {@link OutputConstraint}. */
export type OutputConstraintKind = OutputConstraint['kind'];

/**
 * A model's vocabulary as a grammar engine needs it: the bytes each token id adds to the text.
 * Build one from a tokenizer with {@link tokenVocabulary}.
 */
export interface TokenVocabulary {
  /** Length of a logits row: the model's vocabulary size (at least the tokenizer's). */
  readonly size: number;
  /**
   * The bytes of each token id below `size`; `null` for ids that never stand for text (control
   * tokens, padding rows), which a grammar never allows, except stop tokens at its end.
   */
  readonly tokens: readonly (Uint8Array | null)[];
  /** Ids that end a sequence: a grammar allows them once its output is complete. */
  readonly stopTokenIds: readonly number[];
}

/**
 * A bitmask over the vocabulary: bit `t & 31` of word `t >> 5` is set when token `t` may come
 * next. {@link bitmaskWords} words long.
 */
export type TokenBitmask = Int32Array;

/**
 * One sequence's position in a compiled constraint: the tokens it may emit next, advanced token
 * by token. Rolling back `k` tokens, or resetting and accepting the same tokens again, gives the
 * same state (and masks) as before they were accepted.
 */
export interface TokenMatcher {
  /** Tokens accepted so far (since creation or the last {@link reset}). */
  readonly length: number;
  /** True once a stop token was accepted: the output is complete and nothing may follow. */
  readonly isTerminated: boolean;
  /**
   * The tokens allowed next. Asynchronous so that an engine can compute the masks of a step's
   * rows while its forward pass runs.
   */
  nextTokenBitmask(): Promise<TokenBitmask>;
  /**
   * Advances over `token`; false (and no change) when the constraint does not allow it.
   * @throws {@link ModelError} `INVALID_ARGUMENT` for an id outside the vocabulary.
   */
  accept(token: number): boolean;
  /**
   * Forgets the last `count` accepted tokens.
   * @throws {@link ModelError} `INVALID_ARGUMENT` when `count` exceeds {@link length}.
   */
  rollback(count: number): void;
  /** Back to the start of the output. */
  reset(): void;
  /**
   * Text the constraint forces from here whatever the model prefers (e.g. `"name": "` after `{`
   * of a schema whose first property is `name`), possibly empty: what jump-forward decoding
   * can append without sampling.
   */
  forcedText(): string;
  /** Frees the matcher's native state; calling anything afterwards throws. */
  dispose(): void;
}

/** A constraint compiled against one vocabulary; matchers are cheap, compiling is not. */
export interface CompiledConstraint {
  /** The cache key of the constraint ({@link constraintKey}). */
  readonly key: string;
  /** A matcher at the start of the output. */
  createMatcher(): Promise<TokenMatcher>;
}

/**
 * Compiles constraints against one vocabulary, caching compilations by {@link constraintKey}.
 * `@kvasir/model`'s implementation is {@link XGrammarCompiler}.
 */
export interface ConstraintCompiler {
  /** Length of the masks its matchers return (the vocabulary's size). */
  readonly vocabSize: number;
  /**
   * The compiled constraint, from the cache when it was compiled before.
   * @throws {@link ModelError} `INVALID_CONSTRAINT` naming what is wrong (an unsupported schema
   *   keyword, a grammar syntax error, a bad regex), with `details.kind`.
   */
  compile(constraint: OutputConstraint): Promise<CompiledConstraint>;
  /** Releases compiled constraints and native state; matchers already created stay usable. */
  dispose(): void;
}

/** Words in a {@link TokenBitmask} over `vocabSize` tokens. */
export function bitmaskWords(vocabSize: number): number {
  return (vocabSize + 31) >>> 5;
}

/** Whether `mask` allows `token`. */
export function bitmaskAllows(mask: TokenBitmask, token: number): boolean {
  return ((mask[token >>> 5]! >>> (token & 31)) & 1) === 1;
}

/** A constraint error naming its kind. */
export function constraintError(kind: string, message: string, cause?: unknown): ModelError {
  return new ModelError('INVALID_CONSTRAINT', `${kind}: ${message}`, {
    ...(cause === undefined ? {} : { cause }),
    details: { kind },
  });
}

/**
 * Checks a constraint's shape and returns its cache key: equal keys compile to the same
 * grammar (JSON schemas compare by their JSON text, so property order counts, as it does in the
 * output).
 *
 * @throws {@link ModelError} `INVALID_CONSTRAINT` for an unknown kind or a field of the wrong type.
 */
export function constraintKey(constraint: OutputConstraint): string {
  const c = constraint as {
    kind?: unknown;
    schema?: unknown;
    grammar?: unknown;
    pattern?: unknown;
  };
  switch (c.kind) {
    case 'json_object':
      return 'json_object';
    case 'json_schema': {
      const s = c.schema;
      if (typeof s !== 'boolean' && (typeof s !== 'object' || s === null || Array.isArray(s))) {
        throw constraintError('json_schema', 'the schema must be a JSON object or a boolean');
      }
      let text: string | undefined;
      try {
        text = JSON.stringify(s);
      } catch (e) {
        throw constraintError('json_schema', `the schema is not JSON: ${(e as Error).message}`, e);
      }
      return `json_schema:${text}`;
    }
    case 'grammar':
      if (typeof c.grammar !== 'string' || c.grammar.trim() === '') {
        throw constraintError('grammar', 'the grammar must be a non-empty string');
      }
      return `grammar:${c.grammar}`;
    case 'regex':
      if (typeof c.pattern !== 'string' || c.pattern === '') {
        throw constraintError('regex', 'the pattern must be a non-empty string');
      }
      return `regex:${c.pattern}`;
    case 'structural_tag': {
      const f = (constraint as { format?: unknown }).format;
      if (typeof f !== 'object' || f === null || Array.isArray(f)) {
        throw constraintError('structural_tag', 'the format must be a JSON object');
      }
      return `structural_tag:${JSON.stringify(f)}`;
    }
    default:
      throw constraintError(
        String(c.kind),
        'unknown constraint kind (expected json_object, json_schema, grammar, regex or structural_tag)',
      );
  }
}
