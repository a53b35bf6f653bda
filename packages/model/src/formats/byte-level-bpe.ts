import { ModelError } from '../errors.js';

/** GPT-2's pre-tokenization pattern (contractions, letters, numbers, punctuation, spaces). */
export const GPT2_SPLIT_PATTERN =
  "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

let byteToChar: string[] | undefined;

/**
 * GPT-2's byte → printable character table used by byte-level BPE vocabularies
 * (space is `Ġ`, newline `Ċ`, ...). Index = byte value.
 */
export function byteLevelAlphabet(): readonly string[] {
  if (byteToChar) return byteToChar;
  const bs: number[] = [];
  for (let b = 0x21; b <= 0x7e; b++) bs.push(b);
  for (let b = 0xa1; b <= 0xac; b++) bs.push(b);
  for (let b = 0xae; b <= 0xff; b++) bs.push(b);
  const cs = [...bs];
  let n = 0;
  for (let b = 0; b < 256; b++) {
    if (!bs.includes(b)) {
      bs.push(b);
      cs.push(256 + n);
      n++;
    }
  }
  const table = new Array<string>(256);
  for (let i = 0; i < bs.length; i++) table[bs[i]!] = String.fromCodePoint(cs[i]!);
  byteToChar = table;
  return table;
}

/** Result of {@link trainByteLevelBpe}. */
export interface ByteLevelBpe {
  /** Merges in priority order, each as `[left, right]` byte-level token strings. */
  readonly merges: readonly (readonly [string, string])[];
}

/**
 * Learns up to `maxMerges` byte-level BPE merges from `corpus` (most frequent adjacent pair
 * first, ties broken by the lexicographically smaller pair, pairs seen only once never merged).
 * Deterministic: the same corpus always gives the same merges.
 */
export function trainByteLevelBpe(corpus: string, maxMerges: number): ByteLevelBpe {
  const alphabet = byteLevelAlphabet();
  const enc = new TextEncoder();
  const wordCounts = new Map<string, number>();
  for (const m of corpus.matchAll(new RegExp(GPT2_SPLIT_PATTERN, 'gu'))) {
    const w = m[0];
    wordCounts.set(w, (wordCounts.get(w) ?? 0) + 1);
  }
  const words: { syms: string[]; count: number }[] = [];
  for (const [w, count] of wordCounts) {
    words.push({ syms: [...enc.encode(w)].map((b) => alphabet[b]!), count });
  }
  const merges: [string, string][] = [];
  while (merges.length < maxMerges) {
    const pairs = new Map<string, number>();
    for (const { syms, count } of words) {
      for (let i = 0; i + 1 < syms.length; i++) {
        const key = `${syms[i]}\u0000${syms[i + 1]}`;
        pairs.set(key, (pairs.get(key) ?? 0) + count);
      }
    }
    let best: string | undefined;
    let bestCount = 1;
    for (const [k, c] of pairs) {
      if (c > bestCount || (c === bestCount && best !== undefined && k < best)) {
        best = k;
        bestCount = c;
      }
    }
    if (best === undefined) break;
    const [a, b] = best.split('\u0000') as [string, string];
    merges.push([a, b]);
    const joined = a + b;
    for (const w of words) {
      const out: string[] = [];
      for (let i = 0; i < w.syms.length; i++) {
        if (i + 1 < w.syms.length && w.syms[i] === a && w.syms[i + 1] === b) {
          out.push(joined);
          i++;
        } else out.push(w.syms[i]!);
      }
      w.syms = out;
    }
  }
  return { merges };
}

/** Options of {@link buildByteLevelTokenizerConfig}. */
export interface ByteLevelTokenizerConfigSpec {
  /** The special tokens of {@link ByteLevelTokenizerSpec}, ids 256, 257, ... in this order. */
  readonly specialTokens: readonly string[];
  readonly bosToken: string;
  readonly eosToken: string;
  /** Longest input the model takes (`model_max_length`). */
  readonly modelMaxLength: number;
  readonly chatTemplate?: string;
}

/**
 * Builds the `tokenizer_config.json` object that goes with {@link buildByteLevelTokenizerJson}:
 * a fast tokenizer whose special tokens are the ones at ids 256, 257, ...
 */
export function buildByteLevelTokenizerConfig(
  spec: ByteLevelTokenizerConfigSpec,
): Record<string, unknown> {
  const addedTokensDecoder: Record<string, unknown> = {};
  spec.specialTokens.forEach((content, i) => {
    addedTokensDecoder[String(256 + i)] = {
      content,
      lstrip: false,
      normalized: false,
      rstrip: false,
      single_word: false,
      special: true,
    };
  });
  return {
    tokenizer_class: 'PreTrainedTokenizerFast',
    bos_token: spec.bosToken,
    eos_token: spec.eosToken,
    model_max_length: spec.modelMaxLength,
    clean_up_tokenization_spaces: false,
    added_tokens_decoder: addedTokensDecoder,
    ...(spec.chatTemplate !== undefined ? { chat_template: spec.chatTemplate } : {}),
  };
}

/** Options of {@link buildByteLevelTokenizerJson}. */
export interface ByteLevelTokenizerSpec {
  /** Learned merges (their results become vocabulary entries after the specials). */
  readonly merges: readonly (readonly [string, string])[];
  /** Special tokens, given ids 256, 257, ... in this order. */
  readonly specialTokens: readonly string[];
  /** Special token prepended by `encode` when special tokens are added (Llama 3 style). */
  readonly bosToken?: string;
  /** Upper bound on the vocabulary size; merges beyond it are dropped. */
  readonly maxVocab?: number;
}

/**
 * Builds a Hugging Face `tokenizer.json` object for a byte-level BPE vocabulary: ids 0–255
 * are the 256 bytes, then the special tokens, then one token per merge.
 *
 * @throws {@link ModelError} `INVALID_ARGUMENT` when `maxVocab` cannot hold the bytes and specials.
 */
export function buildByteLevelTokenizerJson(spec: ByteLevelTokenizerSpec): Record<string, unknown> {
  const alphabet = byteLevelAlphabet();
  const maxVocab = spec.maxVocab ?? Number.POSITIVE_INFINITY;
  const base = 256 + spec.specialTokens.length;
  if (maxVocab < base) {
    throw new ModelError(
      'INVALID_ARGUMENT',
      `a byte-level vocabulary needs at least ${base} entries (256 bytes + ${spec.specialTokens.length} specials), the limit is ${maxVocab}`,
    );
  }
  const vocab: Record<string, number> = {};
  for (let b = 0; b < 256; b++) vocab[alphabet[b]!] = b;
  const merges: string[] = [];
  let next = base;
  for (const [a, b] of spec.merges) {
    if (next >= maxVocab) break;
    const t = a + b;
    if (vocab[t] !== undefined) continue;
    vocab[t] = next++;
    merges.push(`${a} ${b}`);
  }
  const added = spec.specialTokens.map((content, i) => ({
    id: 256 + i,
    content,
    single_word: false,
    lstrip: false,
    rstrip: false,
    normalized: false,
    special: true,
  }));
  for (const a of added) vocab[a.content] = a.id;
  const bosId = spec.bosToken === undefined ? undefined : vocab[spec.bosToken];
  const postProcessor =
    bosId === undefined
      ? { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: true }
      : {
          type: 'TemplateProcessing',
          single: [
            { SpecialToken: { id: spec.bosToken, type_id: 0 } },
            { Sequence: { id: 'A', type_id: 0 } },
          ],
          pair: [
            { SpecialToken: { id: spec.bosToken, type_id: 0 } },
            { Sequence: { id: 'A', type_id: 0 } },
            { SpecialToken: { id: spec.bosToken, type_id: 1 } },
            { Sequence: { id: 'B', type_id: 1 } },
          ],
          special_tokens: {
            [spec.bosToken!]: { id: spec.bosToken, ids: [bosId], tokens: [spec.bosToken] },
          },
        };
  return {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: added,
    normalizer: null,
    pre_tokenizer: {
      type: 'Sequence',
      pretokenizers: [
        {
          type: 'Split',
          pattern: { Regex: GPT2_SPLIT_PATTERN },
          behavior: 'Isolated',
          invert: false,
        },
        { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false },
      ],
    },
    post_processor: postProcessor,
    decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: byteLevelBpeModel(vocab, merges, false),
  };
}

/**
 * The `model` section of a Hugging Face `tokenizer.json` for byte-level BPE (no unknown token,
 * no byte fallback) over `vocab` and `merges`; `ignoreMerges` lets a whole-word vocabulary hit
 * skip merging, as Llama 3's tokenizer does.
 */
export function byteLevelBpeModel(
  vocab: unknown,
  merges: unknown,
  ignoreMerges: boolean,
): Record<string, unknown> {
  return {
    type: 'BPE',
    dropout: null,
    unk_token: null,
    continuing_subword_prefix: null,
    end_of_word_suffix: null,
    fuse_unk: false,
    byte_fallback: false,
    ignore_merges: ignoreMerges,
    vocab,
    merges,
  };
}
