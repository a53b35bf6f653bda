import { type FileHandle, open, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { Tokenizer as HfTokenizer } from '@huggingface/tokenizers';
import { ModelError } from '../errors.js';
import { readGgufHeader } from '../formats/gguf/header.js';
import { tokenizerJsonFromGguf } from '../formats/gguf/tokenizer-metadata.js';
import {
  checkRegularFile,
  isMissingFileError,
  readRegularTextFile,
} from '../formats/regular-file.js';
import { type ChatMessage, type ChatTemplateOptions, renderChatTemplate } from './chat-template.js';
import { type DetokenizerOptions, IncrementalDetokenizer } from './detokenizer.js';
import { maxTextBytesPerToken } from './text-per-token.js';
import { type PieceSpelling, pieceBytes, pieceSpelling } from './token-bytes.js';

/** Where a tokenizer came from, and its special tokens. */
export interface TokenizerFiles {
  /** Parsed `tokenizer.json`. */
  readonly tokenizerJson: Record<string, unknown>;
  /** Parsed `tokenizer_config.json` (may be empty). */
  readonly tokenizerConfig: Record<string, unknown>;
  /** The chat template, if any. */
  readonly chatTemplate?: string | null;
}

function tokenContent(v: unknown): string | null {
  if (typeof v === 'string') return v;
  if (
    typeof v === 'object' &&
    v !== null &&
    typeof (v as { content?: unknown }).content === 'string'
  ) {
    return (v as { content: string }).content;
  }
  return null;
}

function pickTemplate(v: unknown): string | null {
  if (typeof v === 'string') return v;
  if (Array.isArray(v)) {
    const named = v as { name?: string; template?: string }[];
    return named.find((t) => t.name === 'default')?.template ?? named[0]?.template ?? null;
  }
  return null;
}

/**
 * A model's tokenizer: encoding and decoding through `@huggingface/tokenizers` (pure JS),
 * special tokens, the chat template and incremental detokenization.
 *
 * @example
 * ```ts
 * const tok = await ModelTokenizer.load('./my-model');
 * const ids = tok.encodeChat([{ role: 'user', content: 'Hi!' }]);
 * console.log(tok.decode(ids));
 * ```
 */
export class ModelTokenizer {
  private readonly tok: HfTokenizer;
  private readonly spelling: PieceSpelling;
  /** Added tokens' text (they are written as themselves, never in the vocabulary's spelling). */
  private readonly addedContent = new Map<number, string>();
  private readonly unkToken: string | null;
  /** Ids of every special (control) token. */
  readonly specialTokenIds: ReadonlySet<number>;
  /** Beginning-of-sequence token text, if any. */
  readonly bosToken: string | null;
  /** End-of-sequence token text, if any. */
  readonly eosToken: string | null;
  /** Beginning-of-sequence token id, if any. */
  readonly bosTokenId: number | null;
  /** End-of-sequence token id(s): the tokenizer's eos plus `extraEosTokenIds` given at load. */
  readonly eosTokenIds: readonly number[];
  /** The Jinja chat template, or `null` when the model has none. */
  readonly chatTemplate: string | null;
  /** Number of ids the tokenizer can produce (vocabulary plus added tokens). */
  readonly vocabSize: number;
  /** What the tokenizer was built from: a worker thread builds the same one from it. */
  readonly files: TokenizerFiles;
  #maxTextBytesPerToken: number | undefined | null = null;

  /**
   * @throws {@link ModelError} `TOKENIZER` when `tokenizer.json` is not one the library can load.
   */
  constructor(files: TokenizerFiles, extraEosTokenIds: readonly number[] = []) {
    try {
      this.tok = new HfTokenizer(files.tokenizerJson, files.tokenizerConfig);
    } catch (e) {
      throw new ModelError('TOKENIZER', `cannot load tokenizer.json: ${(e as Error).message}`, {
        cause: e,
      });
    }
    this.files = files;
    const cfg = files.tokenizerConfig;
    const special = new Set<number>();
    for (const [id, t] of this.tok.get_added_tokens_decoder()) {
      if (t.special) special.add(id);
      else this.addedContent.set(id, t.content);
    }
    this.spelling = pieceSpelling(files.tokenizerJson);
    const unk = (files.tokenizerJson.model as { unk_token?: unknown } | undefined)?.unk_token;
    this.unkToken = typeof unk === 'string' ? unk : null;
    this.specialTokenIds = special;
    this.bosToken = tokenContent(cfg.bos_token);
    this.eosToken = tokenContent(cfg.eos_token);
    this.bosTokenId = this.bosToken === null ? null : (this.tok.token_to_id(this.bosToken) ?? null);
    const eos = new Set<number>();
    if (this.eosToken !== null) {
      const id = this.tok.token_to_id(this.eosToken);
      if (id !== undefined) eos.add(id);
    }
    for (const e of extraEosTokenIds) eos.add(e);
    this.eosTokenIds = [...eos];
    this.chatTemplate = files.chatTemplate ?? pickTemplate(cfg.chat_template);
    let max = -1;
    for (const id of this.tok.get_vocab(true).values()) if (id > max) max = id;
    this.vocabSize = max + 1;
  }

  /**
   * Loads `tokenizer.json`, `tokenizer_config.json` and the chat template (`chat_template`
   * in the config, or `chat_template.jinja` / `chat_template.json`) from an HF directory, or the
   * tokenizer embedded in a `.gguf` file's metadata (read from its header only, so a
   * vocabulary-only file works too).
   *
   * @param extraEosTokenIds - more stop ids (e.g. the model config's `eos_token_id` list).
   * @throws {@link ModelError} `IO` for a missing file or one that is not a regular file (a
   *   FIFO, a device), `MALFORMED_FILE` / `TRUNCATED_FILE` for a bad GGUF header, `TOKENIZER`,
   *   `UNSUPPORTED_TOKENIZER`.
   */
  static async load(
    path: string,
    extraEosTokenIds: readonly number[] = [],
  ): Promise<ModelTokenizer> {
    let isDir: boolean;
    try {
      isDir = (await stat(path)).isDirectory();
    } catch (e) {
      throw new ModelError('IO', `tokenizer path ${path} does not exist`, { cause: e });
    }
    if (!isDir) {
      // The header alone: a vocabulary-only GGUF (no tensors) loads too.
      await checkRegularFile(path, 'tokenizer file');
      let fh: FileHandle;
      try {
        fh = await open(path, 'r');
      } catch (e) {
        throw new ModelError('IO', `cannot open ${path}: ${(e as Error).message}`, { cause: e });
      }
      try {
        return ModelTokenizer.fromGguf((await readGgufHeader(fh, path)).metadata, extraEosTokenIds);
      } finally {
        await fh.close();
      }
    }
    // A file that is absent is optional; one that is there but cannot be read (a FIFO, a
    // directory) is an error, not a silent default.
    const readText = async (name: string, optional: boolean): Promise<string | null> => {
      try {
        return await readRegularTextFile(join(path, name), 'tokenizer file');
      } catch (e) {
        if (optional && isMissingFileError(e)) return null;
        throw e;
      }
    };
    const readJson = async (name: string, optional: boolean): Promise<Record<string, unknown>> => {
      const text = await readText(name, optional);
      if (text === null) return {};
      try {
        return JSON.parse(text) as Record<string, unknown>;
      } catch (e) {
        throw new ModelError('TOKENIZER', `${name} is not valid JSON: ${(e as Error).message}`, {
          cause: e,
        });
      }
    };
    const tokenizerJson = await readJson('tokenizer.json', false);
    const tokenizerConfig = await readJson('tokenizer_config.json', true);
    let chatTemplate = pickTemplate(tokenizerConfig.chat_template);
    chatTemplate ??=
      (await readText('chat_template.jinja', true)) ??
      pickTemplate((await readJson('chat_template.json', true)).chat_template);
    return new ModelTokenizer({ tokenizerJson, tokenizerConfig, chatTemplate }, extraEosTokenIds);
  }

  /**
   * Builds the tokenizer embedded in GGUF metadata (`tokenizer.ggml.*`): byte-level BPE
   * (`gpt2`) and SentencePiece BPE (`llama`) vocabularies.
   *
   * @throws {@link ModelError} `UNSUPPORTED_TOKENIZER` for other tokenizer models or
   *   pre-tokenizers; `TOKENIZER` for inconsistent metadata.
   */
  static fromGguf(
    metadata: ReadonlyMap<string, unknown>,
    extraEosTokenIds: readonly number[] = [],
  ): ModelTokenizer {
    const { tokenizerJson, tokenizerConfig, chatTemplate, eosTokenIds } =
      tokenizerJsonFromGguf(metadata);
    return new ModelTokenizer({ tokenizerJson, tokenizerConfig, chatTemplate }, [
      ...eosTokenIds,
      ...extraEosTokenIds,
    ]);
  }

  /**
   * Encodes text to ids. With `addSpecialTokens` (default true) the tokenizer's post-processor
   * adds what the model expects (e.g. the bos token). Special-token text in the input (like
   * `<|eot_id|>`) is matched as the special token.
   */
  encode(text: string, options?: { addSpecialTokens?: boolean }): number[] {
    return this.tok.encode(text, { add_special_tokens: options?.addSpecialTokens ?? true }).ids;
  }

  /**
   * Decodes ids to text. Incomplete UTF-8 at the end comes out as U+FFFD; use
   * {@link createDetokenizer} for streaming.
   */
  decode(ids: readonly number[], options?: { skipSpecialTokens?: boolean }): string {
    if (ids.length === 0) return '';
    return this.tok.decode(ids as number[], {
      skip_special_tokens: options?.skipSpecialTokens ?? false,
      clean_up_tokenization_spaces: false,
    });
  }

  /** The token text of an id (byte-level form), or `undefined`. */
  idToToken(id: number): string | undefined {
    return this.tok.id_to_token(id);
  }

  /** The id of a token text, or `undefined`. */
  tokenToId(token: string): number | undefined {
    return this.tok.token_to_id(token);
  }

  /**
   * The bytes token `id` adds to the output text, exactly (a byte-level piece may be part of a
   * UTF-8 character; a SentencePiece `▁` is a space), or `null` for a special (control) token,
   * the unknown token or an id outside the vocabulary: those never stand for text.
   * Grammar-constrained decoding matches these bytes against the grammar.
   */
  tokenBytes(id: number): Uint8Array | null {
    if (this.specialTokenIds.has(id)) return null;
    const added = this.addedContent.get(id);
    if (added !== undefined) return new TextEncoder().encode(added);
    const piece = this.tok.id_to_token(id);
    if (piece === undefined || piece === this.unkToken) return null;
    return pieceBytes(piece, this.spelling);
  }

  /**
   * The most UTF-8 bytes of input text one token can stand for (the longest vocabulary entry or
   * added token, widened by what the normalizer can shrink), or undefined when the tokenizer can
   * turn an unbounded run of text into one token or none (see {@link maxTextBytesPerToken}). A
   * text of B bytes encodes to at least ⌈B / this⌉ tokens, so a prompt can be refused as too long
   * for a context before it is tokenized. Computed once, over the whole vocabulary.
   */
  get maxTextBytesPerToken(): number | undefined {
    if (this.#maxTextBytesPerToken === null) {
      let longest = 0;
      for (let id = 0; id < this.vocabSize; id++) {
        const bytes = this.specialTokenIds.has(id) ? null : this.tokenBytes(id);
        if (bytes && bytes.length > longest) longest = bytes.length;
      }
      this.#maxTextBytesPerToken = maxTextBytesPerToken(this.files.tokenizerJson, longest);
    }
    return this.#maxTextBytesPerToken;
  }

  /** Whether an id is a special (control) token. */
  isSpecial(id: number): boolean {
    return this.specialTokenIds.has(id);
  }

  /**
   * Renders the chat template over `messages` (see {@link renderChatTemplate}).
   * @throws {@link ModelError} `CHAT_TEMPLATE` when there is no template or it fails.
   */
  applyChatTemplate(messages: readonly ChatMessage[], options?: ChatTemplateOptions): string {
    if (this.chatTemplate === null) {
      throw new ModelError('CHAT_TEMPLATE', 'this tokenizer has no chat template');
    }
    return renderChatTemplate(
      this.chatTemplate,
      messages,
      { bos_token: this.bosToken ?? '', eos_token: this.eosToken ?? '' },
      options,
    );
  }

  /**
   * Renders the chat template and encodes the result without adding special tokens again
   * (templates write their own bos).
   * @throws {@link ModelError} `CHAT_TEMPLATE`.
   */
  encodeChat(messages: readonly ChatMessage[], options?: ChatTemplateOptions): number[] {
    return this.encode(this.applyChatTemplate(messages, options), { addSpecialTokens: false });
  }

  /** A streaming detokenizer over this tokenizer (see {@link IncrementalDetokenizer}). */
  createDetokenizer(
    options?: DetokenizerOptions,
    promptIds: readonly number[] = [],
  ): IncrementalDetokenizer {
    return new IncrementalDetokenizer(this, options, promptIds);
  }
}
