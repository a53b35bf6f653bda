// Writes an exported HF directory's weights as one GGUF file (F16, tokenizer and chat template in
// the metadata) with @kvasir/model's convertToGguf, then checks the file: Kvasir loads both and
// must give the same tokens, chat prompt, logits and greedy continuation; llama.cpp's gguf-py
// reader (when its source is at hand) must read every tensor with the expected type and shape;
// llama.cpp itself (when tooling/llama.cpp/build.sh has built llama-greedy) must tokenize a
// prompt, score it and continue it greedily as Kvasir does.
//
// Usage (after `pnpm build` and export.py): node tooling/train/export_gguf.mjs
//   [--hf tooling/train/runs/<name>/hf] [--out <hf>/../kvasir-mini.gguf] [--dtype F16|F32]
//   [--name kvasir-mini (general.name)]
//   [--tolerance 1e-3] [--gguf-py tooling/llama.cpp/src/gguf-py]
//   [--llama-greedy tooling/llama.cpp/build/bin/llama-greedy] [--json]
// Exits 1 when any check fails. Q/K rows are permuted for llama.cpp's interleaved RoPE on the
// way out and back on the way in, and the two runs use different RoPE layouts, so logits agree to
// f32 rounding, not bit for bit.
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { parseArgs } from 'node:util';

const here = new URL('.', import.meta.url).pathname;
const { generate, loadModel, ModelTokenizer, openCheckpoint } = await import(
  join(here, '../../packages/model/dist/index.js')
);
const { convertToGguf, hfToGgufName } = await import(
  join(here, '../../packages/model/dist/formats.js')
);

const { values } = parseArgs({
  options: {
    hf: { type: 'string', default: join(here, 'runs/kvasir-mini-v1/hf') },
    out: { type: 'string' },
    dtype: { type: 'string', default: 'F16' },
    name: { type: 'string', default: 'kvasir-mini' },
    tolerance: { type: 'string', default: '1e-3' },
    'gguf-py': { type: 'string', default: join(here, '../llama.cpp/src/gguf-py') },
    'llama-greedy': { type: 'string', default: join(here, '../llama.cpp/build/bin/llama-greedy') },
    json: { type: 'boolean', default: false },
  },
});
const hfDir = resolve(values.hf);
const out = resolve(values.out ?? join(dirname(hfDir), 'kvasir-mini.gguf'));
const tolerance = Number(values.tolerance);

await convertToGguf(hfDir, out, {
  dtype: values.dtype,
  metadata: {
    'general.name': values.name,
    // The Brown Corpus's terms, which the weights inherit (see the model card).
    'general.license': 'non-commercial research use only',
  },
});

// Plain prose from three of the corpus's registers plus a chat turn: enough tokens to cover
// ordinary merges, punctuation, digits and the special tokens.
const TEXT =
  'In the beginning was the word, and the word was short. A fortune: you will meet 3 strangers ' +
  'before noon; greet them kindly.\nhouse (noun): a dwelling that serves as living quarters.';
const MESSAGES = [{ role: 'user', content: 'Tell me a fortune.' }];
const GREEDY_TOKENS = 32;
// llama.cpp's F16 kernels against Kvasir's f32 reads of the same F16 values.
const LLAMA_CPP_TOLERANCE = 1e-2;

const config = JSON.parse(readFileSync(join(hfDir, 'config.json'), 'utf8'));
const eos = [config.eos_token_id].flat();
const hfTok = await ModelTokenizer.load(hfDir, eos);
const ggufTok = await ModelTokenizer.load(out, eos);
const sameIds = (a, b) => a.length === b.length && a.every((t, i) => t === b[i]);
const textIds = hfTok.encode(TEXT);
const chatIds = hfTok.encodeChat(MESSAGES, { addGenerationPrompt: true });
const tokenizer = {
  text_ids_equal: sameIds(textIds, ggufTok.encode(TEXT)),
  chat_prompt_equal:
    hfTok.applyChatTemplate(MESSAGES, { addGenerationPrompt: true }) ===
    ggufTok.applyChatTemplate(MESSAGES, { addGenerationPrompt: true }),
  chat_ids_equal: sameIds(chatIds, ggufTok.encodeChat(MESSAGES, { addGenerationPrompt: true })),
  decode_equal: hfTok.decode(textIds) === ggufTok.decode(textIds),
  eos_equal: sameIds([...hfTok.eosTokenIds].sort(), [...ggufTok.eosTokenIds].sort()),
};

/** Logits at every position of `ids` and a greedy continuation of `prompt`, on the CPU backend. */
async function run(path, ids, prompt) {
  const blockSize = 16;
  const numBlocks = Math.ceil((Math.max(ids.length, prompt.length + GREEDY_TOKENS) + 1) / 16) + 1;
  const model = await loadModel(path, {
    backend: 'cpu',
    kvFormat: 'f32',
    weightDtype: 'f32',
    numBlocks,
    blockSize,
  });
  try {
    const n = ids.length;
    const logits = await model.forward({
      tokenIds: Int32Array.from(ids),
      positions: Int32Array.from({ length: n }, (_, i) => i),
      slotMapping: Int32Array.from({ length: n }, (_, i) => i),
      rows: [
        {
          queryStart: 0,
          queryLen: n,
          contextLen: n,
          blockTable: Array.from({ length: Math.ceil(n / blockSize) }, (_, i) => i),
        },
      ],
      logitsIndices: Int32Array.from({ length: n }, (_, i) => i),
    });
    const greedy = await generate(model, prompt, {
      maxNewTokens: GREEDY_TOKENS,
      stopTokenIds: eos,
      firstBlock: 0,
    });
    return { logits: Float32Array.from(logits), greedy };
  } finally {
    await model.destroy();
  }
}

const a = await run(hfDir, textIds, chatIds);
const b = await run(out, textIds, chatIds);
const vocab = config.vocab_size;
let maxAbsDiff = 0;
let top1 = 0;
for (let row = 0; row < textIds.length; row++) {
  let bestA = 0;
  let bestB = 0;
  for (let v = 0; v < vocab; v++) {
    const x = a.logits[row * vocab + v];
    const y = b.logits[row * vocab + v];
    maxAbsDiff = Math.max(maxAbsDiff, Math.abs(x - y));
    if (x > a.logits[row * vocab + bestA]) bestA = v;
    if (y > b.logits[row * vocab + bestB]) bestB = v;
  }
  if (bestA === bestB) top1++;
}

// The tensors the HF directory holds, as llama.cpp names and shapes them (GGUF lists dimensions
// innermost first) and with the types convertToGguf gives them.
const reader = await openCheckpoint(hfDir);
const expected = {};
try {
  for (const t of reader.tensors.values()) {
    expected[hfToGgufName(t.name)] = {
      shape: [...t.shape].reverse(),
      type: t.shape.length === 2 ? values.dtype : 'F32',
    };
  }
} finally {
  await reader.close();
}

let ggufPy = { checked: false, reason: `no gguf-py at ${values['gguf-py']}` };
if (existsSync(join(values['gguf-py'], 'gguf', 'gguf_reader.py'))) {
  const script = `
import json, sys
sys.path.insert(0, sys.argv[1])
from gguf import GGUFReader
r = GGUFReader(sys.argv[2])
def value(name):
    f = r.fields.get(name)
    return None if f is None else f.contents()
print(json.dumps({
  'architecture': value('general.architecture'),
  'name': value('general.name'),
  'context_length': value('llama.context_length'),
  'block_count': value('llama.block_count'),
  'head_count': value('llama.attention.head_count'),
  'head_count_kv': value('llama.attention.head_count_kv'),
  'tokenizer_model': value('tokenizer.ggml.model'),
  'tokenizer_pre': value('tokenizer.ggml.pre'),
  'tokens': len(value('tokenizer.ggml.tokens') or []),
  'merges': len(value('tokenizer.ggml.merges') or []),
  'bos': value('tokenizer.ggml.bos_token_id'),
  'eos': value('tokenizer.ggml.eos_token_id'),
  'chat_template': value('tokenizer.chat_template'),
  'tensors': {t.name: {'shape': [int(d) for d in t.shape], 'type': t.tensor_type.name,
                       'finite': bool(__import__('numpy').isfinite(t.data.astype('float32')).all())}
              for t in r.tensors},
}))
`;
  const read = JSON.parse(
    execFileSync('/usr/bin/python3', ['-c', script, values['gguf-py'], out], {
      encoding: 'utf8',
      maxBuffer: 64 * 1024 * 1024,
    }),
  );
  const names = Object.keys(expected);
  const tensorsMatch =
    Object.keys(read.tensors).length === names.length &&
    names.every((n) => {
      const t = read.tensors[n];
      return t?.finite && t.type === expected[n].type && sameIds(t.shape, expected[n].shape);
    });
  const tokenizerConfig = JSON.parse(readFileSync(join(hfDir, 'tokenizer_config.json'), 'utf8'));
  ggufPy = {
    checked: true,
    architecture: read.architecture,
    name: read.name,
    tensors: Object.keys(read.tensors).length,
    tensors_match: tensorsMatch,
    hparams_match:
      read.architecture === 'llama' &&
      read.name === values.name &&
      read.context_length === config.max_position_embeddings &&
      read.block_count === config.num_hidden_layers &&
      read.head_count === config.num_attention_heads &&
      read.head_count_kv === config.num_key_value_heads,
    tokenizer: `${read.tokenizer_model}/${read.tokenizer_pre}, ${read.tokens} tokens, ${read.merges} merges`,
    tokenizer_match:
      read.tokenizer_model === 'gpt2' &&
      read.tokens === vocab &&
      read.bos === config.bos_token_id &&
      read.eos === eos[0],
    chat_template_match: read.chat_template === tokenizerConfig.chat_template,
  };
}

// llama.cpp itself (tooling/llama.cpp/build.sh builds llama-greedy): its tokens for a prompt, its
// logits after it and its greedy continuation, against Kvasir's on the HF directory. llama.cpp
// runs the F16 matrices in its own kernels, so logits agree to about 1e-3, not to f32 rounding.
let llamaCpp = { checked: false, reason: `no llama-greedy at ${values['llama-greedy']}` };
if (existsSync(values['llama-greedy'])) {
  const prompt = 'And God said, Let there be light: and there was light. And God saw the light,';
  const read = JSON.parse(
    execFileSync(values['llama-greedy'], [out, prompt, String(GREEDY_TOKENS)], {
      encoding: 'utf8',
      maxBuffer: 64 * 1024 * 1024,
    }),
  );
  const ids = hfTok.encode(prompt);
  const k = await run(hfDir, ids, ids);
  const last = k.logits.subarray((ids.length - 1) * vocab, ids.length * vocab);
  let diff = 0;
  for (let v = 0; v < vocab; v++) diff = Math.max(diff, Math.abs(last[v] - read.first_logits[v]));
  // Kvasir stops at an end token; llama-greedy goes on: compare Kvasir's tokens as a prefix.
  llamaCpp = {
    checked: true,
    prompt_tokens_equal: sameIds(read.prompt_tokens, ids),
    max_abs_logit_diff: diff,
    tolerance: LLAMA_CPP_TOLERANCE,
    greedy_equal: sameIds(read.tokens.slice(0, k.greedy.length), k.greedy),
    greedy_tokens: k.greedy.length,
    greedy_text: hfTok.decode(read.tokens, { skipSpecialTokens: true }),
  };
}

const result = {
  hf_dir: hfDir,
  gguf: out,
  gguf_bytes: statSync(out).size,
  dtype: values.dtype,
  tokenizer,
  positions: textIds.length,
  max_abs_logit_diff: maxAbsDiff,
  tolerance,
  top1_agreement: top1 / textIds.length,
  greedy_equal: sameIds(a.greedy, b.greedy),
  greedy_text: hfTok.decode(a.greedy, { skipSpecialTokens: true }),
  gguf_py: ggufPy,
  llama_cpp: llamaCpp,
};
if (values.json) console.log(JSON.stringify(result, null, 2));
else for (const [k, v] of Object.entries(result)) console.log(`${k}: ${JSON.stringify(v)}`);
const ok =
  Object.values(tokenizer).every(Boolean) &&
  maxAbsDiff <= tolerance &&
  result.greedy_equal &&
  (!ggufPy.checked ||
    (ggufPy.tensors_match &&
      ggufPy.hparams_match &&
      ggufPy.tokenizer_match &&
      ggufPy.chat_template_match)) &&
  (!llamaCpp.checked ||
    (llamaCpp.prompt_tokens_equal &&
      llamaCpp.greedy_equal &&
      llamaCpp.max_abs_logit_diff <= LLAMA_CPP_TOLERANCE));
process.exitCode = ok ? 0 : 1;
