#!/usr/bin/python3
"""Block fixtures for @kvasir/quantizer's GGML formats, made by llama.cpp's own code.

Dequantization: for every block format, blocks whose f16 fields (MXFP4: its E8M0 scale byte,
every one of the 256 values) take edge values (0, -0, 1, f16
max and its negative, the smallest and largest subnormals, the smallest normal, infinity,
negative minimums), whose codes cover every code point (random bodies, all-0x00 and all-0xff
bodies, and for Q8_0 a sweep of all 256 codes), with sweeps of every 6-bit (Q3_K, Q4_K, Q5_K)
or 4-bit (Q2_K) sub-block scale and minimum and of Q6_K's int8 scale extremes; gguf-py (numpy)
dequantizes them. Quantization: 14 rows of 256 f32 values (ties, outliers, mixed magnitudes,
f16 overflow and subnormal scales, values under GROUP_MAX_EPS) quantized by ggml-quants.c's
quantize_row_<type>_ref, compiled here by gcc with -ffp-contract=off (quantize_ref.c); for
the legacy formats gguf-py's numpy quantizer must give the same bytes (checked).

Writes packages/quantizer/src/ggml/fixtures/quantize-input.f32.gz (the rows) and <TYPE>.bin.gz:
a little-endian u32 header [n_blocks, n_quantized_values], then n_blocks raw blocks, their
n_blocks * block_size float32 values, then the blocks quantize_row_<type>_ref makes of the
rows. gzip with mtime 0 and seeded generators: rerunning gives the same bytes.

  /usr/bin/python3 tooling/ggml-fixtures/make_fixtures.py [--llama-cpp DIR]

The llama.cpp source (gguf-py, ggml-quants.c) defaults to tooling/llama.cpp/src, which
tooling/llama.cpp/build.sh unpacks from the node-llama-cpp npm package.
"""

import argparse
import gzip
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
OUT = ROOT / "packages/quantizer/src/ggml/fixtures"

parser = argparse.ArgumentParser()
parser.add_argument("--llama-cpp", default=str(ROOT / "tooling/llama.cpp/src"),
                    help="llama.cpp source (gguf-py and ggml-quants.c)")
args = parser.parse_args()
LLAMA = Path(args.llama_cpp)
sys.path.insert(0, str(LLAMA / "gguf-py"))
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType as T  # noqa: E402
from gguf import quants  # noqa: E402

# f16 bit patterns: 0, -0, 1, -1, max, -max, min subnormal, max subnormal, min normal,
# -min subnormal, 0.5, a random-looking normal, +inf.
F16_EDGES = [0x0000, 0x8000, 0x3C00, 0xBC00, 0x7BFF, 0xFBFF, 0x0001, 0x03FF, 0x0400, 0x8001,
             0x3800, 0x2E66, 0x7C00]

# Byte offsets of each format's f16 fields, in struct order (ggml-common.h).
F16_FIELDS = {
    "Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0],
    "Q2_K": [80, 82], "Q3_K": [108], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208],
    "IQ4_NL": [0], "MXFP4": [],
}
# Byte range of each format's sub-block scale field (k-quants only).
SCALES = {"Q2_K": (0, 16), "Q3_K": (96, 108), "Q4_K": (4, 16), "Q5_K": (4, 16), "Q6_K": (192, 208)}
QUANTIZABLE = {"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "MXFP4"}
# MXFP4's only scale is one E8M0 byte (offset 0): blocks 2 .. 257 take every value of it.
E8M0_FIELD = {"MXFP4": 0}


def put_f16(block: np.ndarray, offset: int, bits: int) -> None:
    block[offset] = bits & 0xFF
    block[offset + 1] = bits >> 8


def pack_q3k_scales(sc: list[int]) -> bytes:
    """16 6-bit scales (0..63, stored biased by 32) as Q3_K's 12 bytes."""
    out = [0] * 12
    for j, s in enumerate(sc):
        if j < 8:
            out[j] = s & 0xF
        else:
            out[j - 8] |= (s & 0xF) << 4
        out[8 + j % 4] |= (s >> 4) << (2 * (j // 4))
    return bytes(out)


def pack_q4k_scales(sc: list[int], mn: list[int]) -> bytes:
    """8 6-bit scales and 8 6-bit mins as Q4_K / Q5_K's 12 bytes."""
    out = [0] * 12
    for j in range(8):
        if j < 4:
            out[j] = sc[j]
            out[j + 4] = mn[j]
        else:
            out[j + 4] = (sc[j] & 0xF) | ((mn[j] & 0xF) << 4)
            out[j - 4] |= (sc[j] >> 4) << 6
            out[j] |= (mn[j] >> 4) << 6
    return bytes(out)


def scale_sweeps(name: str) -> list[bytes]:
    """Scale fields that together take every sub-block scale (and min) value."""
    if name == "Q2_K":
        return [bytes(j | ((15 - j) << 4) for j in range(16))]
    if name == "Q3_K":
        return [pack_q3k_scales([(16 * b + j) & 63 for j in range(16)]) for b in range(4)]
    if name in ("Q4_K", "Q5_K"):
        return [pack_q4k_scales([(8 * b + j) & 63 for j in range(8)],
                                [(8 * b + j + 29) & 63 for j in range(8)]) for b in range(8)]
    if name == "Q6_K":
        return [bytes([0x80, 0x7F, 0x00, 0xFF, 0x01, 0x81, 0x7E, 0x40,
                       0xC0, 0x20, 0xE0, 0x10, 0xF0, 0x08, 0xF8, 0x02])]
    return []


def make_blocks(name: str, rng: np.random.Generator) -> np.ndarray:
    qtype = T[name]
    _, type_size = GGML_QUANT_SIZES[qtype]
    fields = F16_FIELDS[name]
    sweeps = scale_sweeps(name)
    n_blocks = max(len(F16_EDGES) + 3, len(sweeps) + 4)
    if name in E8M0_FIELD:
        n_blocks = 256 + 3
    blocks = rng.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint8)
    blocks[0, :] = 0x00
    blocks[1, :] = 0xFF
    for b in range(n_blocks):
        # f16 fields: the edge list in turn, the second field (a minimum) offset so that each
        # scale meets several minimums, negative ones included.
        for k, off in enumerate(fields):
            bits = F16_EDGES[(b + 5 * k) % len(F16_EDGES)]
            if b >= 2:
                put_f16(blocks[b], off, bits)
        if name in SCALES and 2 <= b < 2 + len(sweeps):
            lo, hi = SCALES[name]
            blocks[b, lo:hi] = np.frombuffer(sweeps[b - 2], dtype=np.uint8)
        if name == "Q8_0" and 2 <= b < 10:
            # All 256 int8 codes over eight blocks (random bodies would miss some).
            blocks[b, 2:] = np.arange(32 * (b - 2), 32 * (b - 1), dtype=np.uint8)
        if name in E8M0_FIELD and 2 <= b < 258:
            blocks[b, E8M0_FIELD[name]] = b - 2
    # A finite, ordinary block last, so a decoder that is wrong only off the edges still fails.
    for off in fields:
        put_f16(blocks[-1], off, 0x2E66)
    if name in E8M0_FIELD:
        blocks[-1, E8M0_FIELD[name]] = 124
    return blocks


def quant_inputs(rng: np.random.Generator) -> np.ndarray:
    """Rows of 256 (one k-quant super-block, eight 32-blocks) that stress the quantizers: zeros,
    constants, ties, outliers, sub-blocks of very different magnitudes, all-positive and
    all-negative rows (the minimums), scales past f16's maximum and in its subnormals, values
    under ggml's GROUP_MAX_EPS."""
    n = 256
    i = np.arange(n)
    mixed = rng.normal(size=n) * np.repeat(10.0 ** rng.integers(-3, 4, size=n // 16), 16)
    rows = [
        np.zeros(n),
        np.full(n, -3.0),
        np.linspace(-1, 1, n),
        (i % 32) - 16.0,  # exact half-steps once scaled
        rng.normal(size=n),
        np.where(i % 37 == 7, 50.0, rng.normal(size=n)),
        np.where(i % 41 == 3, -50.0, rng.normal(size=n)),
        mixed,
        np.where(i < 128, 0.0, rng.normal(size=n)),
        rng.normal(size=n) * 1e6,
        rng.normal(size=n) * 1e-6,
        rng.uniform(0.5, 2.0, size=n),
        rng.uniform(-2.0, -0.5, size=n),
        rng.normal(size=n) * 1e-16,
    ]
    return np.concatenate(rows).astype(np.float32)


def build_reference(src: Path, tmp: Path) -> Path:
    """quantize_ref.c with ggml-quants.c as a release build compiles it (NDEBUG: nearest_int's
    range assert off, as in llama-quantize), but with no FP contraction."""
    exe = tmp / "quantize_ref"
    ggml = src / "ggml"
    subprocess.run(["gcc", "-O2", "-std=gnu11", "-ffp-contract=off", "-fno-fast-math", "-DNDEBUG",
                    f"-I{ggml / 'include'}", f"-I{ggml / 'src'}", "-o", str(exe),
                    str(HERE / "quantize_ref.c"), str(ggml / "src/ggml-quants.c"), "-lm"],
                   check=True)
    return exe


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    x = quant_inputs(np.random.default_rng(7))
    path = OUT / "quantize-input.f32.gz"
    path.write_bytes(gzip.compress(x.tobytes(), compresslevel=9, mtime=0))
    total = path.stat().st_size
    with tempfile.TemporaryDirectory() as tmp:
        ref = build_reference(LLAMA, Path(tmp))
        for i, name in enumerate(F16_FIELDS):
            rng = np.random.default_rng(1000 + i)
            qtype = T[name]
            blocks = make_blocks(name, rng)
            with np.errstate(invalid="ignore", over="ignore"):
                values = quants.dequantize(blocks.reshape(-1), qtype).astype(np.float32)
            q = subprocess.run([str(ref), name, str(x.size)], input=x.tobytes(),
                               capture_output=True, check=True).stdout
            if name in QUANTIZABLE:
                # gguf-py's numpy quantizer is a second, independent reference: they must agree.
                with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                    qp = np.asarray(quants.quantize(x.reshape(-1, 256), qtype), dtype=np.uint8)
                assert qp.tobytes() == q, f"{name}: gguf-py and ggml-quants.c quantize differently"
            data = struct.pack("<II", blocks.shape[0], x.size) + blocks.tobytes() + values.tobytes() + q
            path = OUT / f"{name}.bin.gz"
            # mtime=0: the same input gives the same file.
            path.write_bytes(gzip.compress(data, compresslevel=9, mtime=0))
            total += path.stat().st_size
            print(f"{name}: {blocks.shape[0]} blocks, {len(q)} quantized bytes, {path.stat().st_size} bytes")
    print(f"total {total} bytes")


main()
