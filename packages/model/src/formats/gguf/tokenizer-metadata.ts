import { ModelError } from '../../errors.js';
import { byteLevelBpeModel, GPT2_SPLIT_PATTERN } from '../byte-level-bpe.js';
import type { GgufTypedValue } from './value-types.js';

/** Llama 3's pre-tokenization pattern (numbers in groups of up to three). */
export const LLAMA3_SPLIT_PATTERN =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
/** Qwen2's pre-tokenization pattern (single digits). */
export const QWEN2_SPLIT_PATTERN =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/**
 * Mistral's Tekken pre-tokenization pattern (Mistral Nemo, Ministral), as its `tokenizer.json`
 * writes it: words split before an upper-case run, single digits.
 */
export const TEKKEN_SPLIT_PATTERN =
  '[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+';

/**
 * OpenAI's o200k pre-tokenization pattern (gpt-4o, gpt-oss; llama.cpp's `gpt-4o`), as
 * its `tokenizer.json` writes it: words split before an upper-case run, each with a following
 * contraction, numbers in groups of up to three.
 */
export const O200K_SPLIT_PATTERN =
  "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/** GGUF `tokenizer.ggml.token_type` values. */
const TOKEN_TYPE = {
  normal: 1,
  unknown: 2,
  control: 3,
  userDefined: 4,
  unused: 5,
  byte: 6,
} as const;

/** GPT-2's words as llama.cpp writes the pattern when it chains it after another split. */
const GPT2_WORDS = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";

/**
 * llama.cpp's pre-tokenizer for `tokenizer.ggml.pre = default`: four regexes, each splitting
 * the pieces the previous ones left (runs of punctuation; GPT-2's words; digit runs; groups
 * of three digits).
 */
const DEFAULT_SPLIT_PATTERNS = [
  '[\\p{P}\\$\\+<=>\\^~\\|]+',
  GPT2_WORDS,
  '\\p{N}+',
  '[0-9][0-9][0-9]',
];

/**
 * Pre-tokenizer names (Llama 3's and its aliases, Tekken's) for which llama.cpp adds a bos token
 * unless the file says otherwise, and takes a word that is a token whole before trying merges
 * (`ignore_merges`).
 */
const BOS_AND_WHOLE_WORDS = new Set([
  'llama3',
  'llama-v3',
  'llama-bpe',
  'falcon3',
  'pixtral',
  'tekken',
]);

/** `tokenizer.ggml.pre` names and their split patterns (aliases as llama.cpp groups them). */
const SPLIT_PATTERNS: Readonly<Record<string, readonly string[]>> = {
  default: DEFAULT_SPLIT_PATTERNS,
  'gpt-2': [GPT2_SPLIT_PATTERN],
  gpt2: [GPT2_SPLIT_PATTERN],
  'llama-bpe': [LLAMA3_SPLIT_PATTERN],
  llama3: [LLAMA3_SPLIT_PATTERN],
  'llama-v3': [LLAMA3_SPLIT_PATTERN],
  falcon3: [LLAMA3_SPLIT_PATTERN],
  pixtral: [LLAMA3_SPLIT_PATTERN],
  'smaug-bpe': [LLAMA3_SPLIT_PATTERN],
  qwen2: [QWEN2_SPLIT_PATTERN],
  'deepseek-r1-qwen': [QWEN2_SPLIT_PATTERN],
  tekken: [TEKKEN_SPLIT_PATTERN],
  'gpt-4o': [O200K_SPLIT_PATTERN],
  // Every numeric character alone (½ too, which a `Digits` pre-tokenizer here keeps with its
  // neighbours), then GPT-2's split.
  smollm: ['\\p{N}', GPT2_WORDS],
};

function splitByteLevel(...patterns: string[]): Record<string, unknown> {
  return {
    type: 'Sequence',
    pretokenizers: [
      ...patterns.map((p) => ({
        type: 'Split',
        pattern: { Regex: p },
        behavior: 'Isolated',
        invert: false,
      })),
      { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false },
    ],
  };
}

function preTokenizerFor(pre: string): Record<string, unknown> {
  const patterns = Object.hasOwn(SPLIT_PATTERNS, pre) ? SPLIT_PATTERNS[pre] : undefined;
  if (patterns) return splitByteLevel(...patterns);
  const supported = Object.keys(SPLIT_PATTERNS).join(', ');
  throw new ModelError(
    'UNSUPPORTED_TOKENIZER',
    `GGUF pre-tokenizer "${pre}" is not supported (supported: ${supported})`,
    { details: { pre } },
  );
}

function getArray<T>(
  md: ReadonlyMap<string, unknown>,
  key: string,
  required: boolean,
): T[] | undefined {
  const v = md.get(key);
  if (v === undefined) {
    if (required)
      throw new ModelError('TOKENIZER', `GGUF metadata "${key}" is missing`, { details: { key } });
    return undefined;
  }
  if (!Array.isArray(v))
    throw new ModelError('TOKENIZER', `GGUF metadata "${key}" is not an array`, {
      details: { key },
    });
  return v as T[];
}

/** A tokenizer rebuilt from GGUF metadata in Hugging Face form. */
export interface GgufTokenizerJson {
  /** `tokenizer.json` equivalent. */
  readonly tokenizerJson: Record<string, unknown>;
  /** `tokenizer_config.json` equivalent (bos/eos tokens). */
  readonly tokenizerConfig: Record<string, unknown>;
  /** `tokenizer.chat_template`, if present. */
  readonly chatTemplate: string | null;
  /** eos, eot and eom token ids from the metadata. */
  readonly eosTokenIds: readonly number[];
}

/**
 * Rebuilds a Hugging Face `tokenizer.json` from GGUF metadata: `gpt2` (byte-level BPE with
 * merges; pre-tokenizer from `tokenizer.ggml.pre`) and `llama` (SentencePiece BPE with byte
 * fallback; merges derived from the scores as transformers' converter does), with bos and eos
 * added around a text as `tokenizer.ggml.add_bos_token` / `add_eos_token` say (llama.cpp's
 * defaults when absent: bos for SentencePiece and Llama 3 / Tekken vocabularies, never eos).
 *
 * @throws {@link ModelError} `UNSUPPORTED_TOKENIZER` for other `tokenizer.ggml.model` values
 *   or unknown pre-tokenizers; `TOKENIZER` when required arrays are missing.
 */
export function tokenizerJsonFromGguf(md: ReadonlyMap<string, unknown>): GgufTokenizerJson {
  const model = md.get('tokenizer.ggml.model');
  const tokens = getArray<string>(md, 'tokenizer.ggml.tokens', true)!;
  const types = getArray<number>(md, 'tokenizer.ggml.token_type', false) ?? [];
  const idOf = (key: string): number | undefined => {
    const v = md.get(key);
    return typeof v === 'number' && v >= 0 && v < tokens.length ? v : undefined;
  };
  const bosId = idOf('tokenizer.ggml.bos_token_id');
  const eosId = idOf('tokenizer.ggml.eos_token_id');
  const eosTokenIds: number[] = [];
  for (const k of [
    'tokenizer.ggml.eos_token_id',
    'tokenizer.ggml.eot_token_id',
    'tokenizer.ggml.eom_token_id',
  ]) {
    const id = idOf(k);
    if (id !== undefined && !eosTokenIds.includes(id)) eosTokenIds.push(id);
  }
  const vocab: Record<string, number> = {};
  const added: Record<string, unknown>[] = [];
  for (let i = 0; i < tokens.length; i++) {
    const t = tokens[i]!;
    const type = types[i] ?? TOKEN_TYPE.normal;
    if (vocab[t] === undefined) vocab[t] = i;
    // Control and unused tokens (the `[PAD…]` rows a converter pads the vocabulary with) never
    // stand for text: as special tokens they are left out of decoded text and grammars, as
    // llama.cpp leaves them out of a token's piece.
    if (
      type === TOKEN_TYPE.control ||
      type === TOKEN_TYPE.userDefined ||
      type === TOKEN_TYPE.unused
    ) {
      added.push({
        id: i,
        content: t,
        single_word: false,
        lstrip: false,
        rstrip: false,
        normalized: false,
        special: type !== TOKEN_TYPE.userDefined,
      });
    }
  }
  const chatTemplate =
    typeof md.get('tokenizer.chat_template') === 'string'
      ? (md.get('tokenizer.chat_template') as string)
      : null;
  let defaultAddBos: boolean;
  let body: Record<string, unknown>;
  if (model === 'gpt2') {
    const merges = getArray<string>(md, 'tokenizer.ggml.merges', true)!;
    const pre =
      typeof md.get('tokenizer.ggml.pre') === 'string'
        ? (md.get('tokenizer.ggml.pre') as string)
        : 'default';
    defaultAddBos = BOS_AND_WHOLE_WORDS.has(pre);
    body = {
      normalizer: null,
      pre_tokenizer: preTokenizerFor(pre),
      decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
      model: byteLevelBpeModel(vocab, merges, BOS_AND_WHOLE_WORDS.has(pre)),
    };
  } else if (model === 'llama') {
    const scores = getArray<number>(md, 'tokenizer.ggml.scores', true)!;
    const addSpacePrefix = md.get('tokenizer.ggml.add_space_prefix') !== false;
    defaultAddBos = true;
    const unkId = idOf('tokenizer.ggml.unknown_token_id') ?? types.indexOf(TOKEN_TYPE.unknown);
    // SentencePiece BPE applies the merge whose result scores best; enumerate every split of
    // every normal piece into two pieces, ranked by the merged piece's score.
    const ranked: {
      left: string;
      right: string;
      score: number;
      id: number;
      l: number;
      r: number;
    }[] = [];
    for (let i = 0; i < tokens.length; i++) {
      const type = types[i] ?? TOKEN_TYPE.normal;
      if (type !== TOKEN_TYPE.normal && type !== TOKEN_TYPE.userDefined) continue;
      const piece = [...tokens[i]!];
      for (let s = 1; s < piece.length; s++) {
        const left = piece.slice(0, s).join('');
        const right = piece.slice(s).join('');
        const l = vocab[left];
        const r = vocab[right];
        if (l !== undefined && r !== undefined)
          ranked.push({ left, right, score: scores[i] ?? 0, id: i, l, r });
      }
    }
    ranked.sort((a, b) => b.score - a.score || a.id - b.id || a.l - b.l || a.r - b.r);
    body = {
      normalizer: {
        type: 'Sequence',
        normalizers: [
          ...(addSpacePrefix ? [{ type: 'Prepend', prepend: '▁' }] : []),
          { type: 'Replace', pattern: { String: ' ' }, content: '▁' },
        ],
      },
      pre_tokenizer: null,
      decoder: {
        type: 'Sequence',
        decoders: [
          { type: 'Replace', pattern: { String: '▁' }, content: ' ' },
          { type: 'ByteFallback' },
          { type: 'Fuse' },
          ...(addSpacePrefix ? [{ type: 'Strip', content: ' ', start: 1, stop: 0 }] : []),
        ],
      },
      model: {
        type: 'BPE',
        dropout: null,
        unk_token: unkId >= 0 ? tokens[unkId] : null,
        continuing_subword_prefix: null,
        end_of_word_suffix: null,
        fuse_unk: true,
        byte_fallback: true,
        ignore_merges: false,
        vocab,
        merges: ranked.map((m) => [m.left, m.right]),
      },
    };
  } else {
    throw new ModelError(
      'UNSUPPORTED_TOKENIZER',
      `GGUF tokenizer model ${JSON.stringify(model)} is not supported (supported: gpt2 byte-level BPE, llama SentencePiece BPE)`,
      { details: { model } },
    );
  }
  const flag = (key: string, fallback: boolean) => {
    const v = md.get(key);
    return typeof v === 'boolean' ? v : fallback;
  };
  const addBos = flag('tokenizer.ggml.add_bos_token', defaultAddBos) && bosId !== undefined;
  const addEos = flag('tokenizer.ggml.add_eos_token', false) && eosId !== undefined;
  const bosTok = bosId === undefined ? null : tokens[bosId]!;
  const eosTok = eosId === undefined ? null : tokens[eosId]!;
  // llama.cpp's add_special: bos before the text, eos after it, as the file asks.
  const around = (seq: 'A' | 'B', typeId: number) => [
    ...(addBos ? [{ SpecialToken: { id: bosTok, type_id: typeId } }] : []),
    { Sequence: { id: seq, type_id: typeId } },
    ...(addEos ? [{ SpecialToken: { id: eosTok, type_id: typeId } }] : []),
  ];
  const specialTokens: Record<string, unknown> = {};
  if (addBos) specialTokens[bosTok!] = { id: bosTok, ids: [bosId], tokens: [bosTok] };
  if (addEos) specialTokens[eosTok!] = { id: eosTok, ids: [eosId], tokens: [eosTok] };
  const postProcessor =
    addBos || addEos
      ? {
          type: 'TemplateProcessing',
          single: around('A', 0),
          pair: [...around('A', 0), ...around('B', 1)],
          special_tokens: specialTokens,
        }
      : null;
  return {
    tokenizerJson: {
      version: '1.0',
      truncation: null,
      padding: null,
      added_tokens: added,
      post_processor: postProcessor,
      ...body,
    },
    tokenizerConfig: {
      bos_token: bosTok,
      eos_token: eosTok,
      clean_up_tokenization_spaces: false,
    },
    chatTemplate,
    eosTokenIds,
  };
}

function detectPre(preTokenizer: unknown): string {
  const json = JSON.stringify(preTokenizer ?? null);
  if (json.includes(JSON.stringify(LLAMA3_SPLIT_PATTERN))) return 'llama-bpe';
  if (json.includes(JSON.stringify(QWEN2_SPLIT_PATTERN))) return 'qwen2';
  if (json.includes(JSON.stringify(TEKKEN_SPLIT_PATTERN))) return 'tekken';
  if (json.includes(JSON.stringify(GPT2_SPLIT_PATTERN))) return 'gpt-2';
  const p = preTokenizer as { type?: string; use_regex?: boolean } | null;
  if (p?.type === 'ByteLevel' && p.use_regex !== false) return 'gpt-2';
  throw new ModelError(
    'UNSUPPORTED_TOKENIZER',
    'cannot express this tokenizer.json pre-tokenizer as a GGUF tokenizer.ggml.pre value',
  );
}

/**
 * GGUF `tokenizer.*` metadata for a byte-level BPE `tokenizer.json` (what llama.cpp's converter
 * writes for `gpt2`-style vocabularies): tokens in id order, token types, merges, bos/eos ids,
 * the pre-tokenizer name and the chat template. With `vocabSize` (the model's embedding rows),
 * the token list is padded to it with unused `[PAD<i>]` tokens, as llama.cpp's converter does:
 * llama.cpp refuses a file whose token count differs from the embedding's rows.
 *
 * @throws {@link ModelError} `UNSUPPORTED_TOKENIZER` for non-BPE or non-byte-level tokenizers.
 */
export function ggufTokenizerMetadata(
  tokenizerJson: Record<string, unknown>,
  tokenizerConfig: Record<string, unknown>,
  chatTemplate: string | null,
  vocabSize = 0,
): Record<string, unknown | GgufTypedValue> {
  const model = tokenizerJson.model as
    | { type?: string; vocab?: Record<string, number>; merges?: unknown[] }
    | undefined;
  if (model?.type !== 'BPE' || !model.vocab || !Array.isArray(model.merges)) {
    throw new ModelError(
      'UNSUPPORTED_TOKENIZER',
      'only BPE tokenizer.json files can be written to GGUF',
    );
  }
  const pre = detectPre(tokenizerJson.pre_tokenizer);
  const added =
    (tokenizerJson.added_tokens as
      | { id: number; content: string; special: boolean }[]
      | undefined) ?? [];
  let n = vocabSize;
  for (const id of Object.values(model.vocab)) n = Math.max(n, id + 1);
  for (const a of added) n = Math.max(n, a.id + 1);
  const tokens = Array.from({ length: n }, (_, i) => `[PAD${i}]`);
  const types = new Array<number>(n).fill(TOKEN_TYPE.unused);
  for (const [t, id] of Object.entries(model.vocab)) {
    tokens[id] = t;
    types[id] = TOKEN_TYPE.normal;
  }
  for (const a of added) {
    tokens[a.id] = a.content;
    types[a.id] = a.special ? TOKEN_TYPE.control : TOKEN_TYPE.userDefined;
  }
  const merges = model.merges.map((m) => (Array.isArray(m) ? m.join(' ') : String(m)));
  const idOf = (v: unknown): number | undefined => {
    const s = typeof v === 'string' ? v : (v as { content?: string } | null)?.content;
    if (s === undefined) return undefined;
    const i = tokens.indexOf(s);
    return i >= 0 ? i : undefined;
  };
  const md: Record<string, unknown | GgufTypedValue> = {
    'tokenizer.ggml.model': 'gpt2',
    'tokenizer.ggml.pre': pre,
    'tokenizer.ggml.tokens': tokens,
    'tokenizer.ggml.token_type': { type: 'array', itemType: 'i32', value: types },
    'tokenizer.ggml.merges': merges,
  };
  const bos = idOf(tokenizerConfig.bos_token);
  const eos = idOf(tokenizerConfig.eos_token);
  if (bos !== undefined) md['tokenizer.ggml.bos_token_id'] = bos;
  if (eos !== undefined) md['tokenizer.ggml.eos_token_id'] = eos;
  const pp = tokenizerJson.post_processor as { type?: string } | null | undefined;
  md['tokenizer.ggml.add_bos_token'] = pp?.type === 'TemplateProcessing' && bos !== undefined;
  if (chatTemplate !== null) md['tokenizer.chat_template'] = chatTemplate;
  return md;
}
