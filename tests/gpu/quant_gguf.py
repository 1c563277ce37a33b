#!/usr/bin/env python3
"""Random-weight quantised Llama GGUF files at real shapes, with the per-tensor type mixes of
llama-quantize's presets (Q4_K_M, Q5_K_M, Q3_K_M, Q2_K, Q6_K, Q8_0, Q4_0, and a mix of the
legacy 32-element types), a mix of every IQ type (IQ) or of the ternary ones (TQ), or F16 / BF16
throughout. Blocks are random bytes with their f16 scales set so that each
weight matrix's elements have a standard deviation near 1/sqrt(columns) (activations keep
their scale through the layers): any valid encoding serves, since the loaders under test
decode whatever the blocks say and the checks compare our backends on the same file.
Usage: quant_gguf.py OUT.gguf SHAPE MIX [--layers N] [--vocab N]"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_writer as W  # noqa: E402

SHAPES = {  # dim, ffn, heads, kv heads, layers, vocab
    "smollm2-135m": (576, 1536, 9, 3, 30, 49152),
    "llama3.2-1b": (2048, 8192, 32, 8, 16, 128256),
    "llama2-7b": (4096, 11008, 32, 32, 32, 32000),
    "tiny": (256, 512, 4, 2, 2, 512),  # CI: K-quant rows, seconds on a CPU
    # CI, tensor parallelism over K-quants: Llama-2-7B's feed-forward width (43 blocks of 256,
    # split 22 + 21 over 2 ranks) and heads of 128 (whole blocks of wo's columns at N = 2, 4).
    "tiny-k": (1024, 11008, 8, 2, 2, 512),
}
# ggml type: (id, block elements, block bytes, [(f16 offset, multiple of d)]: the scale d
# itself and fields derived from it (minima set so that a block's mean is near zero), and the
# standard deviation of a block's values in units of d for uniform random quants and scales.
TYPES = {
    "Q4_0": (2, 32, 18, [(0, 1.0)], 4.6),
    "Q4_1": (3, 32, 20, [(0, 1.0), (2, -7.5)], 4.6),
    "Q5_0": (6, 32, 22, [(0, 1.0)], 9.2),
    "Q5_1": (7, 32, 24, [(0, 1.0), (2, -15.5)], 9.2),
    "Q8_0": (8, 32, 34, [(0, 1.0)], 74.0),
    "Q2_K": (10, 256, 84, [(80, 1.0), (82, 1.5)], 10.0),
    "Q3_K": (11, 256, 110, [(108, 1.0)], 42.5),
    "Q4_K": (12, 256, 144, [(0, 1.0), (2, 7.5)], 170.0),
    "Q5_K": (13, 256, 176, [(0, 1.0), (2, 15.5)], 300.0),
    "Q6_K": (14, 256, 210, [(208, 1.0)], 1370.0),
    # IQ1_M keeps its f16 d in the top nibbles of four u16 words at bytes 48-55 ("iq1_m").
    "IQ2_XXS": (16, 256, 66, [(0, 1.0)], 53.0),
    "IQ2_XS": (17, 256, 74, [(0, 1.0)], 56.0),
    "IQ3_XXS": (18, 256, 98, [(0, 1.0)], 141.0),
    "IQ1_S": (19, 256, 50, [(0, 1.0)], 7.2),
    "IQ4_NL": (20, 32, 18, [(0, 1.0)], 67.0),
    "IQ3_S": (21, 256, 110, [(0, 1.0)], 141.0),
    "IQ2_S": (22, 256, 82, [(0, 1.0)], 56.0),
    "IQ4_XS": (23, 256, 136, [(0, 1.0)], 1240.0),
    "IQ1_M": (29, 256, 56, [("iq1_m", 1.0)], 7.2),
    "TQ1_0": (34, 256, 54, [(52, 1.0)], 0.82),
    "TQ2_0": (35, 256, 66, [(64, 1.0)], 1.1),
}
# The IQ mix: each matrix kind of layer i takes IQ[kind][i % 2]; TQ alternates the two ternary
# types the same way.
IQ = {"token_embd": "IQ4_NL", "output": "IQ1_M", "attn_q": ("IQ2_XXS", "IQ3_S"),
      "attn_k": ("IQ2_XS", "IQ2_XXS"), "attn_v": ("IQ3_XXS", "IQ4_XS"), "attn_output": ("IQ3_S", "IQ2_S"),
      "ffn_gate": ("IQ2_S", "IQ1_S"), "ffn_up": ("IQ1_S", "IQ4_NL"), "ffn_down": ("IQ4_XS", "IQ1_M")}


def more_bits(i, n):
    """llama-quantize's layers that get the larger type for attn_v and ffn_down."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def mix_type(mix, kind, i, n):
    """The type llama-quantize's preset `mix` gives tensor kind `kind` of layer i of n."""
    if mix == "legacy":
        return {"attn_q": "Q4_1", "attn_k": "Q5_0", "attn_v": "Q5_1", "attn_output": "Q4_0",
                "ffn_gate": "Q5_1", "ffn_up": "Q5_1", "ffn_down": "Q8_0", "token_embd": "Q4_1",
                "output": "Q8_0"}[kind]
    if mix in ("Q6_K", "Q8_0", "F16", "BF16"):
        return mix
    if mix == "IQ":
        t = IQ[kind]
        return t if isinstance(t, str) else t[i % 2]
    if mix == "TQ":
        return ("TQ1_0", "TQ2_0")[(i + len(kind)) % 2]
    if mix == "Q4_0":
        return "Q6_K" if kind == "output" else "Q4_0"
    if kind == "output":
        return "Q6_K"
    base = {"Q4_K_M": "Q4_K", "Q5_K_M": "Q5_K", "Q3_K_M": "Q3_K", "Q2_K": "Q2_K"}[mix]
    if kind in ("attn_v", "ffn_down") and i >= 0 and more_bits(i, n):
        return {"Q4_K": "Q6_K", "Q5_K": "Q6_K", "Q3_K": "Q5_K", "Q2_K": "Q4_K"}[base]
    if mix == "Q3_K_M" and kind in ("attn_v", "attn_output"):
        return "Q4_K"
    if mix == "Q2_K" and kind == "attn_v":
        return "Q3_K"
    return base


def random_matrix(rng, name, rows, cols):
    if name in ("F16", "BF16"):  # uniform with variance 1/cols, as our random shapes
        w = rng.uniform(-np.sqrt(3 / cols), np.sqrt(3 / cols), size=(rows, cols)).astype(np.float32)
        if name == "F16":
            return W.GGML_F16, w.astype(np.float16).tobytes(), [rows, cols]
        return W.GGML_BF16, (w.view(np.uint32) >> 16).astype(np.uint16).tobytes(), [rows, cols]
    t = TYPES[name]
    tid, be, bb, scales, spread = t
    if cols % be:  # as llama-quantize does for rows it cannot split into K blocks
        name = "Q8_0"
        tid, be, bb, scales, spread = TYPES[name]
    nb = rows * cols // be
    raw = rng.integers(0, 256, size=(nb, bb), dtype=np.uint8)
    d = rng.uniform(0.5, 1.5, size=nb) / np.sqrt(cols) / spread
    for off, mul in scales:
        set_f16(raw, off, d * mul)
    return tid, raw.tobytes(), [rows, cols]


def set_f16(raw, off, values):
    """Store values as f16 at byte `off` of each block (rows of raw), or as IQ1_M's d."""
    bits = values.astype(np.float16).view(np.uint16)
    if off == "iq1_m":
        words = raw[:, 48:56].copy().view(np.uint16)
        for i in range(4):
            words[:, i] = (words[:, i] & 0x0FFF) | (((bits >> (4 * i)) & 0xF) << 12)
        raw[:, 48:56] = words.view(np.uint8)
    else:
        raw[:, off:off + 2] = bits.view(np.uint8).reshape(-1, 2)


def byte_tokens(n):
    """A byte-level BPE vocabulary of n tokens with no merges: GPT-2's characters for the 256
    bytes, then placeholders (enough for `thincuda info` and `generate`)."""
    keep = [b for b in range(256) if chr(b).isprintable() and b not in (32, 127, 160, 173)]
    shown = {b: chr(b) for b in keep}
    extra = 0
    for b in range(256):
        if b not in shown:
            shown[b] = chr(256 + extra)
            extra += 1
    return [shown[b] for b in range(256)] + [f"<unused{i}>" for i in range(n - 256)]


def write(path, shape, mix, layers=None, vocab=None, tokenizer=False):
    dim, ffn, heads, kv, n, voc = SHAPES[shape]
    n = layers or n
    voc = vocab or voc
    hd = dim // heads
    rng = np.random.default_rng(0)
    meta = {
        "general.architecture": "llama",
        "general.name": f"thincuda random {shape} {mix}",
        "llama.block_count": n,
        "llama.context_length": 4096,
        "llama.embedding_length": dim,
        "llama.feed_forward_length": ffn,
        "llama.attention.head_count": heads,
        "llama.attention.head_count_kv": kv,
        "llama.rope.freq_base": 10000.0,
        "llama.rope.dimension_count": hd,
        "llama.attention.layer_norm_rms_epsilon": 1e-5,
    }
    if tokenizer:
        meta.update({"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": byte_tokens(voc),
                     "tokenizer.ggml.merges": []})

    def norm():
        v = (1.0 + 0.1 * rng.standard_normal(dim)).astype(np.float32)
        return W.GGML_F32, v.tobytes(), [dim]

    out = [("token_embd.weight",) + random_matrix(rng, mix_type(mix, "token_embd", -1, n), voc, dim)]
    for i in range(n):
        mat = lambda kind, r, c: (f"blk.{i}.{kind}.weight",) + random_matrix(rng, mix_type(mix, kind, i, n), r, c)
        out += [
            (f"blk.{i}.attn_norm.weight",) + norm(),
            mat("attn_q", dim, dim), mat("attn_k", kv * hd, dim), mat("attn_v", kv * hd, dim),
            mat("attn_output", dim, dim),
            (f"blk.{i}.ffn_norm.weight",) + norm(),
            mat("ffn_gate", ffn, dim), mat("ffn_up", ffn, dim), mat("ffn_down", dim, ffn),
        ]
    out.append(("output_norm.weight",) + norm())
    out.append(("output.weight",) + random_matrix(rng, mix_type(mix, "output", -1, n), voc, dim))
    W.write(path, meta, out)


if __name__ == "__main__":
    a = sys.argv[1:]
    opt = lambda k: int(a[a.index(k) + 1]) if k in a else None
    write(a[0], a[1], a[2], opt("--layers"), opt("--vocab"))
