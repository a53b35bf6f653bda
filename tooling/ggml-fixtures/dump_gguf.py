#!/usr/bin/python3
"""Dumps every tensor of a GGUF file as raw bytes plus a manifest.json (name, GGML type name,
shape as GGUF stores it: ne[0] first), with llama.cpp's gguf-py.
  /usr/bin/python3 tooling/ggml-fixtures/dump_gguf.py file.gguf outdir [--llama-cpp DIR]"""
import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
parser = argparse.ArgumentParser()
parser.add_argument("gguf")
parser.add_argument("out")
parser.add_argument("--llama-cpp", default=str(ROOT / "tooling/llama.cpp/src"))
args = parser.parse_args()
sys.path.insert(0, str(Path(args.llama_cpp) / "gguf-py"))
from gguf import GGUFReader  # noqa: E402

out = Path(args.out)
out.mkdir(parents=True, exist_ok=True)
tensors = []
for i, t in enumerate(GGUFReader(args.gguf).tensors):
    path = out / f"{i}.bin"
    path.write_bytes(t.data.tobytes())
    tensors.append({"name": t.name, "type": t.tensor_type.name, "shape": [int(n) for n in t.shape],
                    "file": path.name})
(out / "manifest.json").write_text(json.dumps(tensors, indent=1))
