#!/usr/bin/python3
"""Tokenizer fixtures for @kvasir/model's GGUF tokenizers, tokenized by llama.cpp itself.

llama.cpp ships vocabulary-only GGUF files of real models (models/ggml-vocab-*.gguf) with the
texts its own tokenizer tests use (*.inp: whitespace runs, emoji, CJK, accents, code, numbers).
Those files are megabytes; this script cuts each vocabulary down to the tokens the texts can
reach and writes it as a small vocabulary-only GGUF (gguf-py), keeping every other key:
- kept: every control, user-defined, unknown and byte token, every single-character token (the
  BPE alphabet), and every token that is a substring of a text as the tokenizer sees it
  (byte-level characters for `gpt2` BPE; `▁` for spaces, with the prefix, for SentencePiece);
- BPE merges whose two sides and result are all kept, in their original order (ranks);
  SentencePiece scores and token types carried along; bos/eos/unk/pad ids renumbered.
A merge sequence only ever builds substrings of the word it works on, so the cut vocabulary
tokenizes these texts into the same token strings: checked here, by llama.cpp on both files.

Then llama.cpp's tokenizer (tooling/llama.cpp/tokenize-json.cpp, built by build.sh) tokenizes
every text on the cut file, with and without the bos it adds, special tokens' text parsed as
the tokens. Written to tooling/ggml-fixtures/tokenizers/: <name>.gguf and <name>.json
({"source", "tokenizer_model", "pre", "texts", "llama_cpp": [{"add_special",
"no_add_special"}, ...]}).

  tooling/llama.cpp/build.sh && /usr/bin/python3 tooling/ggml-fixtures/make_tokenizer_fixtures.py

Vocabularies: llama-spm (Llama 2's SentencePiece, also Mistral 7B v0.1's), qwen2 (byte-level BPE,
pre-tokenizer qwen2), llama-bpe (Llama 3), gpt-2, and gpt-2's vocabulary with the pre-tokenizers
`default` (llama.cpp's four-regex default split), `tekken` (Mistral Nemo's, Ministral's),
`smollm` and `gpt-4o` (gpt-oss's o200k), and llama-spm with `tokenizer.ggml.add_eos_token` set.
"""

import argparse
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
parser = argparse.ArgumentParser()
parser.add_argument("--llama-cpp", default=str(ROOT / "tooling/llama.cpp/src"))
parser.add_argument("--bin", default=str(ROOT / "tooling/llama.cpp/build/bin"))
parser.add_argument("--out", default=str(HERE / "tokenizers"))
parser.add_argument("--only", nargs="*", help="fixture names to remake (default: all)")
args = parser.parse_args()
sys.path.insert(0, str(Path(args.llama_cpp) / "gguf-py"))
from gguf import GGUFReader, GGUFValueType, GGUFWriter  # noqa: E402

MODELS = Path(args.llama_cpp) / "models"
TOOL = Path(args.bin) / "llama-tokenize-json"
SEP = "\n__ggml_vocab_test__\n"
UNKNOWN, CONTROL, USER_DEFINED, BYTE = 2, 3, 4, 6  # tokenizer.ggml.token_type values

# Prompts as chat templates render them, per vocabulary, beside llama.cpp's own test texts.
CHAT = {
    "llama-spm": [
        "<s>[INST] What is 2+2? [/INST] 4</s>[INST] And 3×3? [/INST]",
        "[INST] <<SYS>>\nAnswer briefly.\n<</SYS>>\n\nHi 👋 there [/INST]",
    ],
    "qwen2": [
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
        "Hi 👋, what's 12345 + 678?<|im_end|>\n<|im_start|>assistant\n",
    ],
    "llama-bpe": [
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi 👋, 12345 apples?"
        "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
    ],
    "gpt-2": ["<|endoftext|>Hello, world! 12345 <|endoftext|>"],
}

VOCABS = [
    # name, source file, metadata overrides, chat texts
    ("llama-spm", "ggml-vocab-llama-spm.gguf", {}, CHAT["llama-spm"]),
    ("qwen2", "ggml-vocab-qwen2.gguf", {}, CHAT["qwen2"]),
    ("llama-bpe", "ggml-vocab-llama-bpe.gguf", {}, CHAT["llama-bpe"]),
    ("gpt-2", "ggml-vocab-gpt-2.gguf", {}, CHAT["gpt-2"]),
    ("gpt-2-default", "ggml-vocab-gpt-2.gguf", {"tokenizer.ggml.pre": "default"}, CHAT["gpt-2"]),
    # Mistral Nemo's and Ministral's pre-tokenizer; llama.cpp ships no tekken vocabulary.
    ("gpt-2-tekken", "ggml-vocab-gpt-2.gguf", {"tokenizer.ggml.pre": "tekken"}, CHAT["gpt-2"]),
    ("gpt-2-smollm", "ggml-vocab-gpt-2.gguf", {"tokenizer.ggml.pre": "smollm"}, CHAT["gpt-2"]),
    # gpt-oss's o200k pre-tokenizer (gpt-4o: case-split words with their contractions, digits
    # in threes); llama.cpp ships no o200k vocabulary.
    ("gpt-2-gpt4o", "ggml-vocab-gpt-2.gguf", {"tokenizer.ggml.pre": "gpt-4o"},
     CHAT["gpt-2"] + ["HelloWorld's CamelCase I'M LOUD, they'RE 1234567 items\n\n  done"]),
    # A file that asks for eos after the text (llama.cpp appends it with add_special).
    ("llama-spm-eos", "ggml-vocab-llama-spm.gguf", {"tokenizer.ggml.add_eos_token": True},
     CHAT["llama-spm"]),
]


def byte_level(text: str) -> str:
    """GPT-2's bytes-to-unicode mapping of the text's UTF-8 bytes."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(
        range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    table = dict(zip(bs, map(chr, cs)))
    return "".join(table[b] for b in text.encode("utf-8"))


def views(model: str, texts: list[str], specials: list[str]) -> list[str]:
    """The texts as the tokenizer's vocabulary spells them (superset: any split is covered)."""
    out = []
    for t in texts:
        parts = [t]
        for s in specials:
            parts = [q for p in parts for q in p.split(s)]
        for p in [t, *parts]:
            out.append(byte_level(p) if model == "gpt2" else "▁" + p.replace(" ", "▁"))
    return out


def cut(src: Path, overrides: dict, texts: list[str] | None, dst: Path) -> None:
    """Writes src's vocabulary cut to what `texts` can reach (all of it for None)."""
    r = GGUFReader(src)
    f = r.fields
    model = f["tokenizer.ggml.model"].contents()
    tokens = f["tokenizer.ggml.tokens"].contents()
    types = f["tokenizer.ggml.token_type"].contents()
    scores = f["tokenizer.ggml.scores"].contents() if "tokenizer.ggml.scores" in f else None
    merges = f["tokenizer.ggml.merges"].contents() if "tokenizer.ggml.merges" in f else None
    specials = [t for t, ty in zip(tokens, types) if ty in (CONTROL, USER_DEFINED)]
    seen = views(model, texts, specials) if texts is not None else None
    keep = []
    for i, (t, ty) in enumerate(zip(tokens, types)):
        if (seen is None or ty in (UNKNOWN, CONTROL, USER_DEFINED, BYTE) or len(t) == 1
                or any(t in v for v in seen)):
            keep.append(i)
    new_id = {old: new for new, old in enumerate(keep)}
    kept = {tokens[i] for i in keep}
    arch = f["general.architecture"].contents()
    w = GGUFWriter(dst, arch)
    array_keys = {"tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.scores",
                  "tokenizer.ggml.merges"}
    id_keys = [k for k in f if k.startswith("tokenizer.ggml.") and k.endswith("_token_id")]
    for key, field in f.items():
        if key.startswith("GGUF.") or key == "general.architecture" or key in array_keys:
            continue
        value = overrides.get(key, field.contents())
        if key in id_keys:
            if value not in new_id:
                continue
            value = new_id[value]
        vtype = field.types[0]
        sub = field.types[1] if vtype == GGUFValueType.ARRAY else None
        w.add_key_value(key, value, vtype, sub_type=sub)
    for key, value in overrides.items():
        if key not in f:
            w.add_key_value(key, value, GGUFValueType.STRING)
    w.add_key_value("general.source.url", f"llama.cpp models/{src.name}, cut to the fixture texts",
                    GGUFValueType.STRING)
    w.add_token_list([tokens[i] for i in keep])
    w.add_token_types([types[i] for i in keep])
    if scores is not None:
        w.add_token_scores([scores[i] for i in keep])
    if merges is not None:
        w.add_token_merges([m for m in merges
                            if (lr := m.split(" ", 1)) and lr[0] in kept and lr[1] in kept
                            and lr[0] + lr[1] in kept])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def llama_cpp(file: Path, texts: list[str]) -> list[dict]:
    res = subprocess.run([str(TOOL), str(file)], input=(SEP.join(texts) + SEP).encode("utf-8"),
                         capture_output=True, check=True)
    out = json.loads(res.stdout)
    assert len(out) == len(texts), (file, len(out), len(texts))
    return out


def pieces(file: Path, runs: list[dict]) -> list[list[str]]:
    toks = GGUFReader(file).fields["tokenizer.ggml.tokens"].contents()
    return [[toks[i] for i in r["add_special"]] for r in runs]


def main() -> None:
    if not TOOL.exists():
        sys.exit(f"missing {TOOL}: run tooling/llama.cpp/build.sh")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, src_name, overrides, chat in VOCABS:
        if args.only and name not in args.only:
            continue
        src = MODELS / src_name
        inp = (MODELS / f"{src_name}.inp").read_text(encoding="utf-8")
        texts = inp.split(SEP)
        if texts and texts[-1] == "":
            texts.pop()
        texts += chat
        dst = out / f"{name}.gguf"
        cut(src, overrides, texts, dst)
        runs = llama_cpp(dst, texts)
        # The cut must not change what llama.cpp makes of the texts: the same token strings as
        # on the whole vocabulary (with the same overrides).
        full = src
        if overrides:
            full = out / f"{name}.full.tmp.gguf"
            cut(src, overrides, None, full)
        expected = pieces(full, llama_cpp(full, texts))
        if overrides:
            full.unlink()
        got = pieces(dst, runs)
        if got != expected:
            bad = [i for i, (x, y) in enumerate(zip(got, expected)) if x != y]
            sys.exit(f"{name}: the cut vocabulary tokenizes texts {bad[:5]} differently")
        r = GGUFReader(dst).fields
        fixture = {
            "source": f"llama.cpp models/{src_name}" + (f" with {overrides}" if overrides else ""),
            "tokenizer_model": r["tokenizer.ggml.model"].contents(),
            "pre": r["tokenizer.ggml.pre"].contents() if "tokenizer.ggml.pre" in r else None,
            "texts": texts,
            "llama_cpp": runs,
        }
        (out / f"{name}.json").write_text(json.dumps(fixture, ensure_ascii=False, indent=0) + "\n",
                                          encoding="utf-8")
        print(f"{name}: {len(texts)} texts, {len(r['tokenizer.ggml.tokens'].contents())} tokens, "
              f"{dst.stat().st_size} bytes")


if __name__ == "__main__":
    main()
