#!/usr/bin/env python3
"""Seeds for the model-loading fuzz targets, each under 200 KB: hfquant (tests/fuzz/fuzz_hfquant.c:
a little-endian u32 length, config.json, model.safetensors) from tests/model/quant_hf.py's cases
at a one-layer shape of 128 wide, and ggufload (tests/fuzz/fuzz_ggufload.c: a GGUF image) from
tests/gpu/quant_gguf.py's block types at a one-layer shape whose rows are one 256-block.
Usage: make_seeds.py OUT_DIR (writes OUT_DIR/seed-hfquant and OUT_DIR/seed-ggufload)"""
import json
import os
import struct
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "model"))
sys.path.insert(0, os.path.join(ROOT, "tests", "gpu"))
import gguf_writer as W  # noqa: E402
import quant_gguf as QG  # noqa: E402
import quant_hf as QH  # noqa: E402

QH.SHAPES["fuzz"] = (128, 128, 2, 1, 1, 32)  # dim, ffn, heads, kv heads, layers, vocab


def hf_seed(out, case, flags=0):
    with tempfile.TemporaryDirectory() as d:
        QH.write(d, case, "fuzz")
        cfg = open(os.path.join(d, "config.json"), "rb").read()
        st = open(os.path.join(d, "model.safetensors"), "rb").read()
    name = case + ("-open" if flags & 1 << 30 else "") + ("-b64" if flags & 1 << 31 else "")
    with open(os.path.join(out, name), "wb") as f:
        f.write(struct.pack("<I", len(cfg) | flags) + cfg + st)


def hf_seed_quantised_ends(out):
    """gptq-asym4 with the embedding, lm_head and final norm quantised too (modules the model
    reads as a table, the last product and a vector: the norm's 16 inputs become f32)."""
    from safetensors.numpy import load_file
    rng = np.random.default_rng(1)
    with tempfile.TemporaryDirectory() as d:
        QH.write(d, "gptq-asym4", "fuzz")
        cfg = open(os.path.join(d, "config.json"), "rb").read()
        t = load_file(os.path.join(d, "model.safetensors"))
        for name, (rows, cols) in {"model.embed_tokens": (32, 128), "lm_head": (32, 128),
                                   "model.norm": (8, 16)}.items():
            t.pop(name + ".weight")
            w = rng.standard_normal((rows, cols)).astype(np.float32) * 0.1
            q, z, s, g_idx = QH.quantise(rng, w, 4, 32, False, False, False)
            qweight, qzeros = QH.pack_gptq(q, z, 4, True)
            t.update({name + ".qweight": qweight, name + ".qzeros": qzeros, name + ".scales": s,
                      name + ".g_idx": g_idx})
        QH.save_tensors(t, os.path.join(d, "model.safetensors"))
        st = open(os.path.join(d, "model.safetensors"), "rb").read()
    with open(os.path.join(out, "gptq-asym4-ends"), "wb") as f:
        f.write(struct.pack("<I", len(cfg)) + cfg + st)


def gguf_seed(path, mix, arch="llama", align1=False, in_perm=False):
    """One layer: dim 256 (one K block a row), one head of 32 (key_length), ffn 32, vocab 32;
    matrices whose rows are not whole 256-blocks fall back to Q8_0 as llama-quantize does.
    align1: general.alignment 1 and the data at an odd address (no padding); in_perm: an
    act-order input order for attn_q (I32 [dim], reversed)."""
    dim, ffn, hd, voc = 256, 32, 32, 32
    rng = np.random.default_rng(0)
    meta = {"general.architecture": arch, "general.name": f"fuzz {mix}",
            f"{arch}.block_count": 1, f"{arch}.context_length": 64,
            f"{arch}.embedding_length": dim, f"{arch}.feed_forward_length": ffn,
            f"{arch}.attention.head_count": 1, f"{arch}.attention.head_count_kv": 1,
            f"{arch}.attention.key_length": hd, f"{arch}.attention.value_length": hd,
            f"{arch}.rope.freq_base": 10000.0,
            f"{arch}.attention.layer_norm_rms_epsilon": 1e-5}

    def vec(n):
        return W.GGML_F32, (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32).tobytes(), [n]

    def mat(kind, r, c):
        return QG.random_matrix(rng, QG.mix_type(mix, kind, 0, 1), r, c)

    out = [("token_embd.weight",) + mat("token_embd", voc, dim),
           ("blk.0.attn_norm.weight",) + vec(dim),
           ("blk.0.attn_q.weight",) + mat("attn_q", hd, dim),
           ("blk.0.attn_k.weight",) + mat("attn_k", hd, dim),
           ("blk.0.attn_v.weight",) + mat("attn_v", hd, dim),
           ("blk.0.attn_output.weight",) + mat("attn_output", dim, hd),
           ("blk.0.ffn_norm.weight",) + vec(dim),
           ("blk.0.ffn_gate.weight",) + mat("ffn_gate", ffn, dim),
           ("blk.0.ffn_up.weight",) + mat("ffn_up", ffn, dim),
           ("blk.0.ffn_down.weight",) + mat("ffn_down", dim, ffn),
           ("output_norm.weight",) + vec(dim),
           ("output.weight",) + mat("output", voc, dim)]
    if arch == "qwen2":
        out += [(f"blk.0.attn_{x}.bias",) + vec(hd) for x in "qkv"]
    if in_perm:
        out.append(("blk.0.attn_q.in_perm", 26, np.arange(dim)[::-1].astype(np.int32).tobytes(),
                    [dim]))
    if not align1:
        W.write(path, meta, out)
        return
    meta["general.alignment"] = 1
    align, W.ALIGN = W.ALIGN, 1
    try:
        for n in range(1, 5):  # a name that leaves the header, and so the data, at 1 mod 4
            meta["general.name"] = "x" * n
            W.write(path, meta, out)
            if (os.path.getsize(path) - sum(len(t[2]) for t in out)) % 4 == 1:
                break
    finally:
        W.ALIGN = align


if __name__ == "__main__":
    hf = os.path.join(sys.argv[1], "seed-hfquant")
    gg = os.path.join(sys.argv[1], "seed-ggufload")
    os.makedirs(hf, exist_ok=True)
    os.makedirs(gg, exist_ok=True)
    for case in QH.CASES:
        hf_seed(hf, case)
    hf_seed(hf, "gptq-desc-g128", 1 << 30)
    hf_seed(hf, "awq-g128", 1 << 31)
    hf_seed(hf, "ct-w4a16-asym", 1 << 30)
    hf_seed_quantised_ends(hf)
    for mix in ["Q4_0", "Q8_0", "legacy", "Q2_K", "Q3_K_M", "Q4_K_M", "Q5_K_M", "Q6_K", "IQ",
                "TQ", "F16", "BF16"]:
        gguf_seed(os.path.join(gg, mix.lower() + ".gguf"), mix)
    gguf_seed(os.path.join(gg, "qwen2-q4_k_m.gguf"), "Q4_K_M", "qwen2")
    gguf_seed(os.path.join(gg, "legacy-align1.gguf"), "legacy", align1=True)
    gguf_seed(os.path.join(gg, "q4_0-in_perm.gguf"), "Q4_0", in_perm=True)
