#!/usr/bin/env python3
"""Independent reference forward pass of a Llama-family decoder, for @kvasir/model's golden fixture.

Written from the Hugging Face transformers conventions (LlamaForCausalLM / Qwen2ForCausalLM),
sharing no code with the TypeScript implementation:
  - RMSNorm: x * rsqrt(mean(x^2) + eps) * weight
  - rotate-half RoPE on q and k (dims i and i + d/2 rotate together), with Llama-3 frequency scaling
  - GQA: each KV head serves num_heads / num_kv_heads consecutive query heads (repeat_interleave)
  - causal softmax attention scaled by 1/sqrt(head_dim)
  - SwiGLU MLP: down(silu(gate(x)) * up(x))
  - tied embeddings: logits = norm(x) @ embed_tokens.T when there is no lm_head
  - Qwen2: q/k/v projections with bias

Usage: /usr/bin/python3 golden.py <hf-checkpoint-dir> <comma-separated token ids>
Prints {"logits": [[...vocab floats...] per position]} as JSON on stdout. Computed in float64.
Uses Debian's python3-torch (apt-get install python3-torch); falls back to numpy when torch is absent.
"""
import json
import math
import os
import struct
import sys

import numpy as np

try:
    import torch
except ImportError:  # pragma: no cover - the numpy path is the same math
    torch = None


def read_safetensors(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    dtypes = {"F32": np.float32, "F16": np.float16}
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, t = e["data_offsets"]
        if e["dtype"] == "BF16":
            raw = np.frombuffer(data[b:t], dtype=np.uint16).astype(np.uint32) << 16
            arr = raw.view(np.float32)
        else:
            arr = np.frombuffer(data[b:t], dtype=dtypes[e["dtype"]])
        out[name] = arr.astype(np.float64).reshape(e["shape"])
    return out


def load_weights(d):
    index = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(index):
        files = sorted(set(json.load(open(index))["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    w = {}
    for f in files:
        w.update(read_safetensors(os.path.join(d, f)))
    return w


def inv_frequencies(cfg, head_dim):
    base = cfg.get("rope_theta", 10000.0)
    inv = [1.0 / (base ** (2 * i / head_dim)) for i in range(head_dim // 2)]
    rs = cfg.get("rope_scaling")
    if not rs:
        return np.array(inv)
    kind = rs.get("rope_type", rs.get("type"))
    if kind == "linear":
        return np.array(inv) / rs["factor"]
    assert kind == "llama3", kind
    factor, lo, hi, old = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"], rs["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old / lo, old / hi
    out = []
    for f in inv:
        wavelen = 2 * math.pi / f
        if wavelen < high_wavelen:
            out.append(f)
        elif wavelen > low_wavelen:
            out.append(f / factor)
        else:
            smooth = (old / wavelen - lo) / (hi - lo)
            out.append((1 - smooth) * f / factor + smooth * f)
    return np.array(out)


def forward(d, ids):
    cfg = json.load(open(os.path.join(d, "config.json")))
    w = load_weights(d)
    if torch is not None:
        T = lambda a: torch.from_numpy(np.ascontiguousarray(a))  # noqa: E731
        w = {k: T(v) for k, v in w.items()}
        lib = torch
    else:
        lib = None
    H = cfg["hidden_size"]
    nh = cfg["num_attention_heads"]
    nkv = cfg.get("num_key_value_heads") or nh
    hd = cfg.get("head_dim") or H // nh
    eps = cfg["rms_norm_eps"]
    qwen = cfg["model_type"] == "qwen2"
    bias = qwen or cfg.get("attention_bias", False)
    out_bias = (not qwen) and cfg.get("attention_bias", False)
    n = len(ids)

    def rmsnorm(x, g):
        if lib:
            return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * g
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * g

    def silu(x):
        return x * torch.sigmoid(x) if lib else x / (1 + np.exp(-x))

    def rotate_half(x):
        x1, x2 = x[..., : hd // 2], x[..., hd // 2 :]
        return torch.cat((-x2, x1), -1) if lib else np.concatenate((-x2, x1), -1)

    inv = inv_frequencies(cfg, hd)
    freqs = np.outer(np.arange(n, dtype=np.float64), inv)
    emb = np.concatenate((freqs, freqs), -1)
    cos, sin = np.cos(emb), np.sin(emb)
    mask = np.triu(np.full((n, n), -np.inf), 1)
    if lib:
        cos, sin, mask = T(cos), T(sin), T(mask)

    x = w["model.embed_tokens.weight"][list(ids)]
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        h = rmsnorm(x, w[p + "input_layernorm.weight"])
        proj = {}
        for name in ("q", "k", "v"):
            y = h @ w[p + f"self_attn.{name}_proj.weight"].T
            if bias:
                y = y + w[p + f"self_attn.{name}_proj.bias"]
            proj[name] = y
        q = proj["q"].reshape(n, nh, hd).transpose(0, 1) if lib else proj["q"].reshape(n, nh, hd).transpose(1, 0, 2)
        k = proj["k"].reshape(n, nkv, hd).transpose(0, 1) if lib else proj["k"].reshape(n, nkv, hd).transpose(1, 0, 2)
        v = proj["v"].reshape(n, nkv, hd).transpose(0, 1) if lib else proj["v"].reshape(n, nkv, hd).transpose(1, 0, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        group = nh // nkv
        if lib:
            k = k.repeat_interleave(group, dim=0)
            v = v.repeat_interleave(group, dim=0)
            att = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(hd) + mask, -1)
            o = (att @ v).transpose(0, 1).reshape(n, nh * hd)
        else:
            k = np.repeat(k, group, axis=0)
            v = np.repeat(v, group, axis=0)
            s = q @ k.transpose(0, 2, 1) / math.sqrt(hd) + mask
            s = np.exp(s - s.max(-1, keepdims=True))
            att = s / s.sum(-1, keepdims=True)
            o = (att @ v).transpose(1, 0, 2).reshape(n, nh * hd)
        o = o @ w[p + "self_attn.o_proj.weight"].T
        if out_bias:
            o = o + w[p + "self_attn.o_proj.bias"]
        x = x + o
        h = rmsnorm(x, w[p + "post_attention_layernorm.weight"])
        m = silu(h @ w[p + "mlp.gate_proj.weight"].T) * (h @ w[p + "mlp.up_proj.weight"].T)
        x = x + m @ w[p + "mlp.down_proj.weight"].T
    x = rmsnorm(x, w["model.norm.weight"])
    head = w["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else w["lm_head.weight"]
    logits = x @ head.T
    return logits.numpy() if lib else logits


def main():
    d = sys.argv[1]
    ids = [int(t) for t in sys.argv[2].split(",")]
    logits = forward(d, ids)
    json.dump(
        {
            "implementation": f"torch {torch.__version__}" if torch is not None else f"numpy {np.__version__}",
            "logits": [[float(f"{v:.7g}") for v in row] for row in logits],
        },
        sys.stdout,
    )


if __name__ == "__main__":
    main()
