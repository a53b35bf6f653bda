#!/usr/bin/python3
"""Writes a copy of an F32 GGUF whose tensors hold a quantized GGUF's weights dequantized to
float32 by gguf-py (same names, shapes and metadata as the F32 file it copies): llama.cpp on it
computes with the quantized model's exact weights but no quantized arithmetic.
  /usr/bin/python3 tooling/ggml-fixtures/dequantize_gguf.py f32.gguf quantized.gguf out.gguf"""
import shutil
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tooling/llama.cpp/src/gguf-py"))
from gguf import GGUFReader, quants  # noqa: E402

f32_path, quant_path, out = sys.argv[1:4]
shutil.copy(f32_path, out)
by_name = {t.name: t for t in GGUFReader(quant_path).tensors}
with open(out, "r+b") as fh:
    for t in GGUFReader(f32_path).tensors:
        assert t.tensor_type.name == "F32", f"{t.name} is {t.tensor_type.name} in {f32_path}"
        q = by_name[t.name]
        values = quants.dequantize(q.data, q.tensor_type).astype(np.float32)
        assert values.size == t.n_elements, t.name
        fh.seek(t.data_offset)
        fh.write(values.tobytes())
