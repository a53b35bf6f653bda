// Trains the byte-level BPE tokenizer on data/train.txt and tokenizes train and held-out text.
//
// Usage (after `pnpm build`): node tooling/train/train_tokenizer.mjs [--data tooling/train/data]
//   [--vocab 4096]
// Writes into the data directory: tokenizer.json, tokenizer_config.json, train.bin and
// heldout.bin (uint16 little-endian token ids; each document is <|begin_of_text|> text
// <|end_of_text|>) and tokens.json (counts).
//
// The merges are learned here with incremental pair counts (the package's trainByteLevelBpe
// rescans every word per merge, hours on this corpus) under the same rules: GPT-2
// pre-tokenization, most frequent pair first, ties to the lexicographically smaller pair, pairs
// seen once never merged. The tokenizer.json itself is built by @kvasir/model, and the .bin files
// are encoded by its ModelTokenizer, so training sees exactly the ids Kvasir produces.
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';

const here = new URL('.', import.meta.url).pathname;
const { LLAMA3_CHAT_TEMPLATE, ModelTokenizer } = await import(
  join(here, '../../packages/model/dist/index.js')
);
const {
  buildByteLevelTokenizerConfig,
  buildByteLevelTokenizerJson,
  byteLevelAlphabet,
  GPT2_SPLIT_PATTERN,
} = await import(join(here, '../../packages/model/dist/formats.js'));

/** Llama 3's names; ids 256–260 in this order (as the package's random checkpoint uses). */
export const SPECIAL_TOKENS = [
  '<|begin_of_text|>',
  '<|end_of_text|>',
  '<|start_header_id|>',
  '<|end_header_id|>',
  '<|eot_id|>',
];
const BOS = SPECIAL_TOKENS[0];
const EOT = SPECIAL_TOKENS[1];

const { values } = parseArgs({
  options: {
    data: { type: 'string', default: join(here, 'data') },
    vocab: { type: 'string', default: '4096' },
  },
});
const dataDir = values.data;
const vocabSize = Number(values.vocab);

function documents(file) {
  const text = readFileSync(join(dataDir, file), 'utf8');
  const docs = text.split(EOT);
  if (docs.at(-1) === '') docs.pop();
  return docs;
}

function learnMerges(docs, maxMerges) {
  const specials = new RegExp(SPECIAL_TOKENS.map((s) => s.replace(/[|]/g, '\\|')).join('|'), 'g');
  const split = new RegExp(GPT2_SPLIT_PATTERN, 'gu');
  const counts = new Map();
  for (const doc of docs) {
    for (const part of doc.split(specials)) {
      for (const m of part.matchAll(split)) counts.set(m[0], (counts.get(m[0]) ?? 0) + 1);
    }
  }
  const alphabet = byteLevelAlphabet();
  const enc = new TextEncoder();
  const symText = [...alphabet];
  const words = [];
  for (const [w, count] of counts) words.push({ syms: [...enc.encode(w)], count });

  // A pair of symbol ids packed into one number (ids stay below 2^16).
  const key = (a, b) => a * 65536 + b;
  const pairCount = new Map();
  const pairWords = new Map();
  const addWord = (wi, sign) => {
    const { syms, count } = words[wi];
    for (let i = 0; i + 1 < syms.length; i++) {
      const k = key(syms[i], syms[i + 1]);
      const c = (pairCount.get(k) ?? 0) + sign * count;
      if (c === 0) pairCount.delete(k);
      else pairCount.set(k, c);
      if (sign > 0) {
        let s = pairWords.get(k);
        if (!s) {
          s = new Set();
          pairWords.set(k, s);
        }
        s.add(wi);
      }
    }
  };
  for (let wi = 0; wi < words.length; wi++) addWord(wi, 1);

  const pairText = (k) => `${symText[Math.floor(k / 65536)]}\u0000${symText[k % 65536]}`;
  const merges = [];
  while (merges.length < maxMerges) {
    let best = -1;
    let bestCount = 1;
    for (const [k, c] of pairCount) {
      if (c > bestCount || (c === bestCount && best >= 0 && pairText(k) < pairText(best))) {
        best = k;
        bestCount = c;
      }
    }
    if (best < 0) break;
    const a = Math.floor(best / 65536);
    const b = best % 65536;
    const joined = symText.length;
    symText.push(symText[a] + symText[b]);
    merges.push([symText[a], symText[b]]);
    const touched = [...(pairWords.get(best) ?? [])];
    pairWords.delete(best);
    for (const wi of touched) {
      addWord(wi, -1);
      const old = words[wi].syms;
      const out = [];
      for (let i = 0; i < old.length; i++) {
        if (i + 1 < old.length && old[i] === a && old[i + 1] === b) {
          out.push(joined);
          i++;
        } else out.push(old[i]);
      }
      words[wi].syms = out;
      addWord(wi, 1);
    }
    if (merges.length % 500 === 0) console.error(`merges: ${merges.length} (count ${bestCount})`);
  }
  return merges;
}

function encodeAll(tok, docs, eotId) {
  const ids = [];
  for (const doc of docs) {
    for (const id of tok.encode(doc, { addSpecialTokens: true })) ids.push(id);
    ids.push(eotId);
  }
  const out = new Uint16Array(ids.length);
  out.set(ids);
  return out;
}

const t0 = Date.now();
const trainDocs = documents('train.txt');
const heldoutDocs = documents('heldout.txt');
const merges = learnMerges(trainDocs, vocabSize - 256 - SPECIAL_TOKENS.length);
console.error(`learned ${merges.length} merges in ${((Date.now() - t0) / 1000).toFixed(1)} s`);

const tokenizerJson = buildByteLevelTokenizerJson({
  merges,
  specialTokens: SPECIAL_TOKENS,
  bosToken: BOS,
  maxVocab: vocabSize,
});
const tokenizerConfig = buildByteLevelTokenizerConfig({
  specialTokens: SPECIAL_TOKENS,
  bosToken: BOS,
  eosToken: '<|eot_id|>',
  modelMaxLength: 512,
  chatTemplate: LLAMA3_CHAT_TEMPLATE,
});
const json = (v) => `${JSON.stringify(v, null, 2)}\n`;
writeFileSync(join(dataDir, 'tokenizer.json'), json(tokenizerJson));
writeFileSync(join(dataDir, 'tokenizer_config.json'), json(tokenizerConfig));

const tok = new ModelTokenizer({ tokenizerJson, tokenizerConfig });
if (tok.bosTokenId !== 256 || tok.idToToken(257) !== EOT) {
  throw new Error('special token ids are not 256 (bos) and 257 (end of text)');
}
const t1 = Date.now();
const train = encodeAll(tok, trainDocs, 257);
const heldout = encodeAll(tok, heldoutDocs, 257);
console.error(`encoded in ${((Date.now() - t1) / 1000).toFixed(1)} s`);
writeFileSync(join(dataDir, 'train.bin'), train);
writeFileSync(join(dataDir, 'heldout.bin'), heldout);
const trainBytes = Buffer.byteLength(trainDocs.join(''));
const heldoutBytes = Buffer.byteLength(heldoutDocs.join(''));
const stats = {
  vocab_size: tok.vocabSize,
  merges: merges.length,
  train_docs: trainDocs.length,
  heldout_docs: heldoutDocs.length,
  train_tokens: train.length,
  heldout_tokens: heldout.length,
  train_bytes: trainBytes,
  heldout_bytes: heldoutBytes,
  train_bytes_per_token: +(trainBytes / train.length).toFixed(3),
};
writeFileSync(join(dataDir, 'tokens.json'), json(stats));
console.error(stats);
