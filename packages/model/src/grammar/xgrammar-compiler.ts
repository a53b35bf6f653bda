import type {
  CompiledGrammar,
  GrammarCompiler,
  GrammarMatcher,
  StructuralTagFormat,
  TokenizerInfo,
} from '@mlc-ai/web-xgrammar';
import { ModelError } from '../errors.js';
import { byteLevelAlphabet } from '../formats/byte-level-bpe.js';
import {
  type CompiledConstraint,
  type ConstraintCompiler,
  constraintError,
  constraintKey,
  type OutputConstraint,
  type StructuralFormat,
  type TokenBitmask,
  type TokenMatcher,
  type TokenVocabulary,
} from './output-constraint.js';
import { Utf8Masks } from './utf8-masks.js';
import { loadXGrammar, type XGrammarInstance, type XGrammarModule } from './xgrammar-module.js';

/** Options of {@link XGrammarCompiler.create}. */
export interface XGrammarCompilerOptions {
  /**
   * Where each XGrammar instance comes from. Default: `@mlc-ai/web-xgrammar` evaluated from
   * `node_modules` (Node). In a worker, `() => evaluateXGrammar(text)` with the bundle's text
   * (each call a fresh instance, as in Node); or pass an imported `{ module }` instead (an
   * instance that aborts cannot be replaced then: later compilations fail).
   */
  readonly load?: () => XGrammarInstance;
  /** XGrammar's module as imported (browsers); ignored when `load` is given. */
  readonly module?: XGrammarModule;
  /** Compiled constraints kept for reuse (least recently used go first). Default 64. */
  readonly cacheSize?: number;
  /**
   * How JSON output may be spaced. `compact` (the default): one line, `", "` and `": "` between
   * elements (Python's `json.dumps`), nothing else; weak models cannot loop on whitespace, masks
   * are cheap and more of the output is forced (jump-forward). `any`: any whitespace between
   * elements, as XGrammar's and vLLM's default; a small model then often spends its whole budget
   * on spaces and newlines (kvasir-mini did on 2 choices of 2).
   */
  readonly jsonWhitespace?: 'compact' | 'any';
  /**
   * With `jsonWhitespace: 'any'`, the most whitespace characters between two JSON elements;
   * default unbounded. XGrammar expands a bound into states: at 32, compiling a schema of three
   * properties took 30–100× longer (about 1 s against 20 ms on a 4,096-token vocabulary) and
   * masks up to 10 ms a token.
   */
  readonly maxJsonWhitespace?: number;
}

/** A WebAssembly trap (`WebAssembly.RuntimeError`), which Emscripten's `abort()` also throws. */
function isWasmTrap(e: unknown): e is Error {
  return e instanceof Error && e.name === 'RuntimeError';
}

/** XGrammar's JSON formatting arguments. */
interface JsonWhitespace {
  readonly anyWhitespace: boolean;
  readonly indent: number;
  readonly separators: [string, string] | undefined;
  readonly max: number | undefined;
}

/** One XGrammar WebAssembly instance with the vocabulary loaded into it. */
class Runtime {
  /** An instance that aborted once is never trusted again (its stack and heap may be torn). */
  broken = false;

  constructor(
    readonly instance: XGrammarInstance,
    readonly tokenizerInfo: TokenizerInfo,
    readonly compiler: GrammarCompiler,
  ) {}

  /** Runs a call into the instance; a WebAssembly trap marks it broken. */
  call<T>(what: string, fn: () => T): T {
    try {
      return fn();
    } catch (e) {
      throw this.#failure(what, e);
    }
  }

  async callAsync<T>(what: string, fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (e) {
      throw this.#failure(what, e);
    }
  }

  #failure(what: string, e: unknown): unknown {
    if (!isWasmTrap(e)) return e;
    this.broken = true;
    return new ModelError('BACKEND', `XGrammar failed in ${what}: ${e.message}`, { cause: e });
  }

  /** The reason XGrammar printed before aborting (`[FATAL] file:line: reason`), if any. */
  abortReason(): string | undefined {
    let reason: string | undefined;
    for (const line of this.instance.takeMessages()) {
      const m = /^\[FATAL\]\s+\S+:\d+:\s*(.*)$/s.exec(line.trim());
      if (m) reason = m[1]!.trim();
    }
    return reason;
  }
}

/**
 * XGrammar's byte-level spelling of each token (GPT-2's alphabet, so any byte string, even part
 * of a UTF-8 character, survives the trip into the WebAssembly heap as a JS string); control
 * tokens are empty strings, which XGrammar treats as special and never allows.
 */
function byteLevelVocab(vocab: TokenVocabulary): string[] {
  const alphabet = byteLevelAlphabet();
  return vocab.tokens.map((bytes) => {
    if (bytes === null) return '';
    let s = '';
    for (const b of bytes) s += alphabet[b]!;
    return s;
  });
}

/**
 * XGrammar 0.1.27 (and 0.2.x, upstream issue "JSON Schema maxLength/minLength … drops the escape
 * branch") writes a string with `minLength`/`maxLength` as `[^"\\\r\n]{m,n}`, which admits raw
 * control characters (a TAB) that JSON forbids inside strings, so the output would not parse.
 * Narrowed here to the class XGrammar's unbounded strings use, `[^\0-\x1f"\\]`. (Escapes stay
 * unreachable inside bounded strings, as upstream: the output is valid JSON, just without them.)
 */
export function fixBoundedJsonStrings(ebnf: string): string {
  return ebnf.replaceAll('[^"\\\\\\r\\n]{', '[^\\0-\\x1f"\\\\]{');
}

class XGrammarMatcher implements TokenMatcher {
  /** The UTF-8 decoder state before the first token and after each accepted one. */
  #utf8States: number[] = [Utf8Masks.start];
  #disposed = false;

  constructor(
    private readonly runtime: Runtime,
    private readonly matcher: GrammarMatcher,
    private readonly vocabSize: number,
    private readonly utf8: Utf8Masks,
  ) {}

  get length(): number {
    return this.#utf8States.length - 1;
  }

  get #utf8State(): number {
    return this.#utf8States[this.#utf8States.length - 1]!;
  }

  get isTerminated(): boolean {
    this.#check();
    return this.runtime.call('isTerminated', () => this.matcher.isTerminated());
  }

  async nextTokenBitmask(): Promise<TokenBitmask> {
    this.#check();
    const state = this.#utf8State;
    const mask = await this.runtime.callAsync('nextTokenBitmask', () =>
      this.matcher.getNextTokenBitmask(),
    );
    this.utf8.intersect(mask, state);
    return mask;
  }

  accept(token: number): boolean {
    this.#check();
    if (!Number.isInteger(token) || token < 0 || token >= this.vocabSize) {
      throw new ModelError(
        'INVALID_ARGUMENT',
        `TokenMatcher.accept: token ${token} is outside the vocabulary of ${this.vocabSize}`,
      );
    }
    const next = this.utf8.next(this.#utf8State, token);
    if (next < 0) return false;
    const ok = this.runtime.call('accept', () => this.matcher.acceptToken(token));
    if (ok) this.#utf8States.push(next);
    return ok;
  }

  rollback(count: number): void {
    this.#check();
    if (!Number.isInteger(count) || count < 0 || count > this.length) {
      throw new ModelError(
        'INVALID_ARGUMENT',
        `TokenMatcher.rollback: cannot roll back ${count} of ${this.length} tokens`,
      );
    }
    if (count === 0) return;
    this.runtime.call('rollback', () => this.matcher.rollBack(count));
    this.#utf8States.length -= count;
  }

  reset(): void {
    this.#check();
    this.runtime.call('reset', () => this.matcher.reset());
    this.#utf8States = [Utf8Masks.start];
  }

  forcedText(): string {
    this.#check();
    return this.runtime.call('forcedText', () => this.matcher.findJumpForwardString());
  }

  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    if (!this.runtime.broken) this.matcher.dispose();
  }

  #check(): void {
    if (this.#disposed) throw new ModelError('INVALID_ARGUMENT', 'TokenMatcher used after dispose');
  }
}

class XGrammarCompiled implements CompiledConstraint {
  constructor(
    readonly key: string,
    readonly runtime: Runtime,
    private readonly xgrammar: XGrammarModule,
    readonly compiled: CompiledGrammar,
    private readonly vocabSize: number,
    private readonly utf8: Utf8Masks,
  ) {}

  async createMatcher(): Promise<TokenMatcher> {
    const matcher = await this.runtime.callAsync('createMatcher', () =>
      this.xgrammar.GrammarMatcher.createGrammarMatcher(this.compiled),
    );
    return new XGrammarMatcher(this.runtime, matcher, this.vocabSize, this.utf8);
  }
}

/**
 * {@link ConstraintCompiler} over XGrammar (the grammar engine of vLLM, SGLang, TensorRT-LLM and
 * WebLLM), compiled to WebAssembly (`@mlc-ai/web-xgrammar`).
 *
 * XGrammar's WebAssembly build aborts on input it rejects (an unsupported schema, a grammar
 * syntax error) instead of throwing, and an aborted instance is corrupt after a few dozen such
 * aborts. So every compilation that aborts retires its instance: the error names the reason
 * XGrammar printed, later compilations run in a fresh instance, and matchers already created
 * keep working in the old one until they are disposed.
 *
 * @example
 * ```ts
 * const compiler = await XGrammarCompiler.create(tokenVocabulary(tokenizer, { size: 32000 }));
 * const compiled = await compiler.compile({ kind: 'json_schema', schema: { type: 'object' } });
 * const matcher = await compiled.createMatcher();
 * const mask = await matcher.nextTokenBitmask(); // then sample with the mask, accept the token
 * ```
 */
export class XGrammarCompiler implements ConstraintCompiler {
  readonly vocabSize: number;
  readonly #vocab: TokenVocabulary;
  readonly #encodedVocab: string[];
  readonly #utf8: Utf8Masks;
  readonly #load: () => XGrammarInstance;
  readonly #cacheSize: number;
  readonly #whitespace: JsonWhitespace;
  readonly #cache = new Map<string, Promise<XGrammarCompiled>>();
  #runtime: Promise<Runtime> | undefined;
  #disposed = false;
  /** WebAssembly instances created so far (the first, plus one per abort). */
  instances = 0;

  private constructor(vocab: TokenVocabulary, options: XGrammarCompilerOptions) {
    this.vocabSize = vocab.size;
    this.#vocab = vocab;
    this.#encodedVocab = byteLevelVocab(vocab);
    this.#utf8 = new Utf8Masks(vocab);
    const module = options.module;
    this.#load =
      options.load ??
      (module ? () => ({ xgrammar: module, takeMessages: () => [] }) : () => loadXGrammar());
    this.#cacheSize = options.cacheSize ?? 64;
    this.#whitespace =
      options.jsonWhitespace === 'any'
        ? { anyWhitespace: true, indent: 2, separators: undefined, max: options.maxJsonWhitespace }
        : { anyWhitespace: false, indent: -1, separators: [', ', ': '], max: undefined };
  }

  /**
   * A compiler for one vocabulary; loads XGrammar and preprocesses the vocabulary (tens of
   * milliseconds for a 128k vocabulary).
   *
   * @throws {@link ModelError} `INVALID_ARGUMENT` for an empty vocabulary, `BACKEND` when XGrammar
   *   cannot be loaded.
   */
  static async create(
    vocab: TokenVocabulary,
    options: XGrammarCompilerOptions = {},
  ): Promise<XGrammarCompiler> {
    if (vocab.size < 1 || vocab.tokens.length !== vocab.size) {
      throw new ModelError(
        'INVALID_ARGUMENT',
        `XGrammarCompiler: a vocabulary of ${vocab.size} ids with ${vocab.tokens.length} token entries`,
      );
    }
    const compiler = new XGrammarCompiler(vocab, options);
    await compiler.#currentRuntime();
    return compiler;
  }

  /** Compiled constraints in the cache. */
  get cachedCount(): number {
    return this.#cache.size;
  }

  compile(constraint: OutputConstraint): Promise<CompiledConstraint> {
    if (this.#disposed) {
      return Promise.reject(new ModelError('INVALID_ARGUMENT', 'XGrammarCompiler was disposed'));
    }
    let key: string;
    try {
      key = constraintKey(constraint);
    } catch (e) {
      return Promise.reject(e);
    }
    const hit = this.#cache.get(key);
    if (hit) {
      // Most recently used last.
      this.#cache.delete(key);
      this.#cache.set(key, hit);
      return hit;
    }
    const pending = this.#compile(key, constraint);
    this.#cache.set(key, pending);
    pending.catch(() => {
      if (this.#cache.get(key) === pending) this.#cache.delete(key);
    });
    while (this.#cache.size > this.#cacheSize) {
      const oldest = this.#cache.keys().next().value as string;
      const evicted = this.#cache.get(oldest)!;
      this.#cache.delete(oldest);
      // Matchers hold their own reference to the grammar; only the handle goes.
      evicted.then((c) => this.#release(c)).catch(() => {});
    }
    return pending;
  }

  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    for (const pending of this.#cache.values()) {
      pending.then((c) => this.#release(c)).catch(() => {});
    }
    this.#cache.clear();
    const runtime = this.#runtime;
    this.#runtime = undefined;
    runtime
      ?.then((r) => {
        if (r.broken) return;
        r.compiler.dispose();
        r.tokenizerInfo.dispose();
      })
      .catch(() => {});
  }

  #release(c: XGrammarCompiled): void {
    if (!c.runtime.broken) c.compiled.dispose();
  }

  #currentRuntime(): Promise<Runtime> {
    if (!this.#runtime) {
      const runtime = this.#createRuntime();
      this.#runtime = runtime;
      runtime.catch(() => {
        if (this.#runtime === runtime) this.#runtime = undefined;
      });
    }
    return this.#runtime;
  }

  async #createRuntime(): Promise<Runtime> {
    const instance = this.#load();
    this.instances++;
    const { xgrammar } = instance;
    const vocab = this.#vocab;
    try {
      const tokenizerInfo = await xgrammar.TokenizerInfo.createTokenizerInfo(
        this.#encodedVocab,
        'byte_level',
        false,
        vocab.size,
        [...vocab.stopTokenIds],
      );
      // Compiled grammars are cached here, with a bound; XGrammar's own cache has none.
      const compiler = await xgrammar.GrammarCompiler.createGrammarCompiler(tokenizerInfo, false);
      return new Runtime(instance, tokenizerInfo, compiler);
    } catch (e) {
      throw new ModelError(
        'BACKEND',
        `XGrammar could not load the vocabulary: ${instance.takeMessages().join(' ') || (e as Error).message}`,
        { cause: e },
      );
    }
  }

  async #compile(key: string, constraint: OutputConstraint): Promise<XGrammarCompiled> {
    let current = this.#currentRuntime();
    let runtime = await current;
    if (runtime.broken) {
      // A matcher trapped in it: replace it before compiling more into it.
      this.#retire(current, runtime);
      current = this.#currentRuntime();
      runtime = await current;
    }
    const { compiler } = runtime;
    const ws = this.#whitespace;
    runtime.instance.takeMessages();
    try {
      let compiled: CompiledGrammar;
      switch (constraint.kind) {
        case 'json_object':
          // Not strict: any property may appear.
          compiled = await compiler.compileJSONSchema(
            '{"type":"object"}',
            ws.anyWhitespace,
            ws.indent,
            ws.separators,
            false,
            ws.max,
          );
          break;
        case 'json_schema':
          // XGrammar's own schema → EBNF conversion (what compileJSONSchema runs first), fixed,
          // then compiled as a grammar.
          compiled = await compiler.compileGrammar(
            await this.#jsonSchemaEbnf(runtime, constraint.schema),
            'root',
          );
          break;
        case 'grammar':
          compiled = await compiler.compileGrammar(constraint.grammar, 'root');
          break;
        case 'regex':
          compiled = await compiler.compileStructuralTag({
            type: 'structural_tag',
            format: { type: 'regex', pattern: constraint.pattern },
          });
          break;
        case 'structural_tag':
          compiled = await compiler.compileStructuralTag({
            type: 'structural_tag',
            format: (await this.#withJsonGrammars(
              runtime,
              constraint.format,
            )) as unknown as StructuralTagFormat,
          });
          break;
      }
      return new XGrammarCompiled(
        key,
        runtime,
        runtime.instance.xgrammar,
        compiled,
        this.vocabSize,
        this.#utf8,
      );
    } catch (e) {
      if (isWasmTrap(e)) {
        const reason = runtime.abortReason();
        this.#retire(current, runtime);
        throw constraintError(constraint.kind, reason ?? `XGrammar rejected it (${e.message})`, e);
      }
      // A C++ exception reaches JavaScript as a number (a pointer), its text printed, if at all.
      const message =
        e instanceof Error ? e.message : (runtime.abortReason() ?? 'XGrammar rejected it');
      throw constraintError(constraint.kind, message, e);
    }
  }

  /** The EBNF of a JSON schema, spaced as this compiler's JSON is, with the upstream fix. */
  async #jsonSchemaEbnf(runtime: Runtime, schema: unknown): Promise<string> {
    const ws = this.#whitespace;
    const ebnf = await runtime.instance.xgrammar.Testings._jsonSchemaToEBNF(
      JSON.stringify(schema),
      ws.anyWhitespace,
      ws.indent,
      ws.separators,
      true,
      ws.max,
    );
    return fixBoundedJsonStrings(ebnf);
  }

  /**
   * A structural format with each `json_schema` part replaced by its grammar: XGrammar would
   * space structural-tag JSON its own way (any whitespace), not as the compiler's option says.
   */
  async #withJsonGrammars(runtime: Runtime, format: StructuralFormat): Promise<unknown> {
    switch (format.type) {
      case 'json_schema':
        return {
          type: 'grammar',
          grammar: await this.#jsonSchemaEbnf(runtime, format.json_schema),
        };
      case 'sequence':
        return {
          ...format,
          elements: await Promise.all(
            format.elements.map((e) => this.#withJsonGrammars(runtime, e)),
          ),
        };
      case 'tag':
        return { ...format, content: await this.#withJsonGrammars(runtime, format.content) };
      case 'tags_with_separator':
      case 'triggered_tags':
        return {
          ...format,
          tags: await Promise.all(format.tags.map((t) => this.#withJsonGrammars(runtime, t))),
        };
      default:
        return format;
    }
  }

  /** Drops a broken instance: the next compilation loads a fresh one. */
  #retire(current: Promise<Runtime>, runtime: Runtime): void {
    runtime.broken = true;
    if (this.#runtime !== current) return;
    this.#runtime = undefined;
    this.#cache.clear();
  }
}
