#!/usr/bin/env python3
"""Tiny GPTQ, AWQ and compressed-tensors Hugging Face folders from random weights, and the
reference unpacking they are checked against. Quantisation is round to nearest per group (the loader's job is the
layout, not the GPTQ or AWQ algorithm); packing follows each format's description:
GPTQ (AutoGPTQ / GPTQModel / optimum): qweight int32 [in * bits / 32, out], input k of output j
at bits bits * (k % (32 / bits)) of word (k // (32 / bits), j); qzeros int32 [groups,
out * bits / 32] packed the same way along the outputs, storing z - 1 in checkpoint_format
"gptq" (v1, AutoGPTQ's packer subtracts one) and z in "gptq_v2"; scales f16 [groups, out];
g_idx int32 [in]. With desc_act the inputs are grouped in a random order (act-order): one order
for the matrices that share an input (q, k and v; gate and up), as GPTQ's order follows the
input's Hessian, or ("apart") one for each matrix.
AWQ (AutoAWQ GEMM): qweight int32 [in, out / 8], output 8 c + [0, 2, 4, 6, 1, 3, 5, 7][p] of
input k in nibble p of word (k, c); qzeros int32 [groups, out / 8] likewise; scales f16
[groups, out]. Weight w[j, k] = s (q - z) of k's group.
compressed-tensors pack-quantized (llm-compressor's W4A16 / W8A16): weight_packed int32
[out, ceil(in * bits / 32)], input k of output j at bits bits * (k % (32 / bits)) of word
(j, k // (32 / bits)), values signed plus 2^(bits - 1); weight_zero_point int32
[ceil(out * bits / 32), groups] packed the same way along the outputs (asymmetric only);
weight_scale [out, groups] in f16, bf16 or f32; weight_shape int64 [out, in]. make_ct_reference.py
records what the compressed-tensors package itself packs and unpacks, for the tests to compare.
The unpacking functions below are written from those descriptions apart from the packers:
shifts and masks over whole arrays, no loop shared with the packing.
Usage: quant_hf.py OUT_DIR CASE [--shape tiny|smollm2-135m|llama3.2-1b|llama2-7b] [--layers N]
       [--vocab N] [--reference REF_DIR] [--fast (GPTQ and AWQ: random packed parts, for
       benchmarks at real shapes)]"""
import json
import os
import sys

import numpy as np
from safetensors.numpy import save_file

SHAPES = {  # dim, ffn, heads, kv heads, layers, vocab
    "tiny": (128, 256, 4, 2, 2, 256),
    # heads of 64 columns: tensor parallelism over 4 ranks in whole q4_1_g64 blocks
    "tiny-h64": (256, 512, 4, 4, 2, 256),
    # odd counts of 128-element blocks in a row (3 and 5)
    "tiny-odd": (384, 640, 6, 2, 2, 256),
    "smollm2-135m": (576, 1536, 9, 3, 30, 49152),
    "llama3.2-1b": (2048, 8192, 32, 8, 16, 128256),
    "llama2-7b": (4096, 11008, 32, 32, 32, 32000),
}
# case: (method, bits, group, sym, desc_act, checkpoint format, held type of its matrices)
CASES = {
    "gptq-sym4": ("gptq", 4, 64, True, False, "gptq", "q4_0"),
    "gptq-sym4-col": ("gptq", 4, -1, True, False, "gptq", "q4_1_g128"),
    "gptq-asym4": ("gptq", 4, 32, False, False, "gptq", "q4_1"),
    "gptq-asym4-v2": ("gptq", 4, 128, False, False, "gptq_v2", "q4_1_g128"),
    "gptq-asym4-col": ("gptq", 4, -1, False, False, "gptq", "q4_1_g128"),
    "gptq-sym8": ("gptq", 8, 128, True, False, "gptq", "q8_0"),
    "gptq-asym8": ("gptq", 8, 64, False, False, "gptq", "f32"),
    "gptq-desc": ("gptq", 4, 32, True, True, "gptq", "q4_0"),
    "gptq-desc-asym4": ("gptq", 4, 64, False, True, "gptq", "q4_1_g64"),
    "gptq-desc-g128": ("gptq", 4, 128, False, True, "gptq", "q4_1_g128"),
    "gptq-desc-sym-g128": ("gptq", 4, 128, True, True, "gptq_v2", "q4_1_g128"),
    "gptq-desc8": ("gptq", 8, 64, True, "apart", "gptq_v2", "q8_0"),
    "awq": ("awq", 4, 64, False, False, "gemm", "q4_1_g64"),
    "awq-g128": ("awq", 4, 128, False, False, "gemm", "q4_1_g128"),
    # compressed-tensors: the format field is the scales' dtype; group -1 is strategy channel
    "ct-w4a16": ("ct", 4, 128, True, False, "f16", "q4_1_g128"),
    "ct-w4a16-asym": ("ct", 4, 32, False, False, "bf16", "q4_1"),
    "ct-w4a16-channel": ("ct", 4, -1, True, False, "f16", "q4_1_g128"),
    "ct-w8a16": ("ct", 8, 64, True, False, "bf16", "q8_0"),
    "ct-w8a16-asym": ("ct", 8, -1, False, False, "f16", "f32"),
    "ct-w4a16-f32-scales": ("ct", 4, 64, True, False, "f32", "f32"),
    "ct-w4a16-group-order": ("ct", 4, 64, False, True, "f16", "q4_1_g64"),  # actorder group
}
AWQ_ORDER = np.array([0, 2, 4, 6, 1, 3, 5, 7])
LINEARS = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
           "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]
GGUF = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
        "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
        "mlp.down_proj": "ffn_down"}


def quantise(rng, w, bits, group, sym, desc_act, coarse, scale_dtype="f16", order=None):
    """Round-to-nearest quantisation of w [out, in]: q [in, out], zeros and scales [groups,
    out], g_idx [in]. coarse keeps 7 significant bits in each scale, so that s z is exact in f16
    (then q4_1's m = -s z carries no rounding). Scales are f16, or f16 values of 8 significant
    bits held as f32 (scale_dtype "bf16": exact in bf16 too), or any f32 ("f32")."""
    out, k = w.shape
    gs = k if group == -1 else group
    groups = (k + gs - 1) // gs
    if order is None:
        order = rng.permutation(k) if desc_act else np.arange(k)
    g_idx = np.empty(k, np.int32)
    g_idx[order] = np.arange(k) // gs
    maxq = (1 << bits) - 1
    s = np.empty((groups, out), np.float32 if scale_dtype != "f16" else np.float16)
    z = np.empty((groups, out), np.int64)
    for g in range(groups):
        x = w[:, g_idx == g]
        if sym:
            sc = 2 * np.abs(x).max(1) / maxq
            zz = np.full(out, (maxq + 1) // 2)
        else:
            lo, hi = np.minimum(x.min(1), 0), np.maximum(x.max(1), 0)
            sc = (hi - lo) / maxq
            zz = np.clip(np.round(-lo / sc), 0, maxq).astype(np.int64)
        s16 = sc.astype(np.float16)
        if coarse:
            s16 = (s16.view(np.uint16) & 0xFFF0).view(np.float16)
        if scale_dtype == "bf16":
            s16 = (s16.view(np.uint16) & 0xFFF8).view(np.float16)
        s[g], z[g] = (sc.astype(np.float32) if scale_dtype == "f32" else s16), zz
    sf = s.astype(np.float32)[g_idx]  # [in, out]
    q = np.clip(np.round(w.T / sf) + z[g_idx], 0, maxq).astype(np.int64)
    return q, z, s, g_idx


def pack_columns(v, bits):
    """Pack v [rows, n] along its second axis, 32 / bits values a word, lowest first."""
    per = 32 // bits
    v = v.astype(np.uint32).reshape(v.shape[0], -1, per)
    words = np.bitwise_or.reduce(v << (bits * np.arange(per, dtype=np.uint32)), axis=2)
    return np.ascontiguousarray(words).view(np.int32)


def pack_gptq(q, z, bits, v1):
    qweight = pack_columns(q.T, bits).T.copy()  # packing runs down the inputs
    stored = (z - (1 if v1 else 0)) & ((1 << bits) - 1)  # v1's z = 0 wraps, as AutoGPTQ's does
    return qweight, pack_columns(stored, bits)


def pack_awq(q, z):
    perm = (np.arange(q.shape[1]).reshape(-1, 8)[:, AWQ_ORDER]).reshape(-1)
    return pack_columns(q[:, perm], 4), pack_columns(z[:, perm], 4)


def pack_ct(q, z, s, bits, sym, scale_dtype, g_idx=None):
    """compressed-tensors pack-quantized parts of q [in, out] (stored values: signed plus
    2^(bits - 1)), z and s [groups, out]; with g_idx (actorder group), weight_g_idx."""
    out, k = q.shape[1], q.shape[0]
    per = 32 // bits
    rows = np.zeros((out, -(-k // per) * per), np.int64)  # the last word padded with zeros
    rows[:, :k] = q.T
    parts = {"weight_packed": pack_columns(rows, bits),
             "weight_scale": np.ascontiguousarray(s.T).astype(
                 np.float16 if scale_dtype == "f16" else np.float32),
             "weight_shape": np.array([out, k], np.int64)}
    if not sym:
        cols = np.zeros((z.shape[0], -(-out // per) * per), np.int64)
        cols[:, :out] = z
        parts["weight_zero_point"] = np.ascontiguousarray(pack_columns(cols, bits).T)
    if g_idx is not None:
        parts["weight_g_idx"] = g_idx.astype(np.int32)
    return parts


def unpack_ct(parts, bits, group):
    """Reference: the weight [out, in] in f32 from a compressed-tensors matrix's parts."""
    out, k = (int(x) for x in parts["weight_shape"])
    mask = (1 << bits) - 1
    shifts = np.arange(0, 32, bits, dtype=np.uint32)
    wp = parts["weight_packed"].view(np.uint32)
    q = ((wp[:, :, None] >> shifts) & mask).reshape(out, -1)[:, :k].astype(np.int64)
    s = parts["weight_scale"].astype(np.float32)  # [out, groups]
    if "weight_zero_point" in parts:
        zp = parts["weight_zero_point"].view(np.uint32)  # [ceil(out / per), groups]
        z = ((zp[:, None, :] >> shifts[None, :, None]) & mask).reshape(-1, zp.shape[1])[:out]
    else:
        z = np.full(s.shape, 1 << (bits - 1))
    g = np.zeros(k, np.int64) if group == -1 else np.arange(k) // group
    if "weight_g_idx" in parts:
        g = parts["weight_g_idx"].astype(np.int64)
    return (s[:, g] * (q - z.astype(np.int64)[:, g]).astype(np.float32)).astype(np.float32)


ST_DTYPES = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16",
             np.dtype(np.int32): "I32", np.dtype(np.int64): "I64"}


def save_tensors(tensors, path, bf16=()):
    """Write a safetensors file (huggingface/safetensors' format: an 8-byte little-endian header
    length, the JSON header, the data), the tensors named in bf16 (f32 values exact in bf16)
    stored as BF16, which numpy has no dtype for."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        v = np.ascontiguousarray(tensors[name])
        dt = ST_DTYPES[v.dtype]
        if name in bf16:
            v, dt = (v.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16), "BF16"
        b = v.tobytes()
        header[name] = {"dtype": dt, "shape": list(v.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little") + h)
        for b in blobs:
            f.write(b)


def unpack_gptq(qweight, qzeros, scales, g_idx, bits, v1):
    """Reference: the weight [out, in] in f32 from a GPTQ matrix's parts."""
    per, mask = 32 // bits, (1 << bits) - 1
    shifts = np.arange(0, 32, bits, dtype=np.uint32)
    qw = qweight.view(np.uint32)
    q = ((qw[:, None, :] >> shifts[None, :, None]) & mask).reshape(qw.shape[0] * per, -1)
    zeros = ((qzeros.view(np.uint32)[:, :, None] >> shifts) & mask).reshape(qzeros.shape[0], -1)
    zeros = zeros.astype(np.int64) + (1 if v1 else 0)
    w = scales.astype(np.float32)[g_idx] * (q.astype(np.int64) - zeros[g_idx]).astype(np.float32)
    return np.ascontiguousarray(w.T)


def unpack_awq(qweight, qzeros, scales, group):
    """Reference: the weight [out, in] in f32 from an AWQ matrix's parts."""
    def nibbles(x):
        x = x.view(np.uint32)
        v = np.empty((x.shape[0], x.shape[1] * 8), np.int64)
        for p in range(8):
            v[:, AWQ_ORDER[p]::8] = (x >> np.uint32(4 * p)) & 15
        return v
    q, zeros = nibbles(qweight), nibbles(qzeros)
    g = np.arange(q.shape[0]) // group
    w = scales.astype(np.float32)[g] * (q - zeros[g]).astype(np.float32)
    return np.ascontiguousarray(w.T)


def unpack(case, parts):
    method, bits, group, _, _, fmt, _ = CASES[case]
    if method == "ct":
        return unpack_ct(parts, bits, group)
    if method == "awq":
        return unpack_awq(parts["qweight"], parts["qzeros"], parts["scales"], group)
    return unpack_gptq(parts["qweight"], parts["qzeros"], parts["scales"], parts["g_idx"], bits,
                       fmt == "gptq")


def config(shape, layers, vocab, quant=None):
    dim, ffn, heads, kv, n, _ = SHAPES[shape]
    c = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": dim,
         "intermediate_size": ffn, "num_hidden_layers": layers or n, "num_attention_heads": heads,
         "num_key_value_heads": kv, "vocab_size": vocab, "max_position_embeddings": 4096,
         "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False,
         "torch_dtype": "float16"}
    if quant:
        c["quantization_config"] = quant
    return c


def quant_config(case):
    method, bits, group, sym, desc_act, fmt, _ = CASES[case]
    if method == "ct":  # as llm-compressor's oneshot writes a W4A16 / W8A16 model
        weights = {"num_bits": bits, "type": "int", "symmetric": sym,
                   "strategy": "channel" if group == -1 else "group",
                   "group_size": None if group == -1 else group, "dynamic": False,
                   "actorder": "group" if desc_act else None, "block_structure": None,
                   "observer": "minmax",
                   "observer_kwargs": {}}
        return {"quant_method": "compressed-tensors", "format": "pack-quantized",
                "quantization_status": "compressed", "global_compression_ratio": None,
                "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights,
                                              "input_activations": None,
                                              "output_activations": None,
                                              "format": "pack-quantized"}},
                "ignore": ["lm_head"], "kv_cache_scheme": None, "sparsity_config": {}}
    if method == "awq":
        return {"quant_method": "awq", "bits": bits, "group_size": group, "zero_point": True,
                "version": "gemm"}
    return {"quant_method": "gptq", "bits": bits, "group_size": group, "sym": sym,
            "desc_act": bool(desc_act), "checkpoint_format": fmt, "damp_percent": 0.01,
            "true_sequential": True}


def reference_matrix(case, seed=11):
    """The k_proj-shaped matrix (tiny: [64 out, 128 in]) of `case` whose packing by the formats'
    own packers make_ct_reference.py and make_gptq_awq_reference.py record: q [in, out], z and
    s [groups, out], g_idx [in], coarse scales (so that q4_1 holds it exactly)."""
    method, bits, group, sym, desc_act, fmt, _ = CASES[case]
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((64, 128)) * 128 ** -0.5).astype(np.float32)
    return quantise(rng, w, bits, group, sym, desc_act, True, fmt if method == "ct" else "f16")


def random_parts(rng, case, rows, cols, order=None):
    """GPTQ or AWQ parts of a [rows, cols] matrix drawn directly: random packed words (every bit
    pattern is a valid packing), symmetric zeros where the case has them, scales that keep the
    weights' standard deviation near 1/sqrt(cols). For benchmarks at real shapes, where
    quantising random weights to nearest would take minutes; no reference unpacking."""
    method, bits, group, sym, desc_act, fmt, _ = CASES[case]
    assert method in ("gptq", "awq"), case
    per = 32 // bits
    gs = cols if group == -1 else group
    groups = -(-cols // gs)
    words = lambda *shape: rng.integers(0, 1 << 32, shape, dtype=np.uint32).view(np.int32)
    s = (rng.uniform(0.5, 1.5, (groups, rows)) * (2.0 / (1 << bits)) * (3.0 / cols) ** 0.5
         ).astype(np.float16)
    if method == "awq":
        return {"qweight": words(cols, rows // 8), "qzeros": words(groups, rows // 8), "scales": s}
    if sym:
        stored = (1 << (bits - 1)) - (1 if fmt == "gptq" else 0)
        zeros = np.full((groups, rows // per), sum(stored << (bits * i) for i in range(per)),
                        np.uint32).view(np.int32)
    else:
        zeros = words(groups, rows // per)
    g_idx = np.empty(cols, np.int32)
    if order is None:
        order = rng.permutation(cols) if desc_act else np.arange(cols)
    g_idx[order] = np.arange(cols) // gs
    return {"qweight": words(cols // per, rows), "qzeros": zeros, "scales": s, "g_idx": g_idx}


def write(out_dir, case, shape="tiny", layers=None, coarse=False, reference=None, seed=0,
          vocab=None, replace=None, quant_config_=None, fast=False):
    """Write folder out_dir of `case`; with `reference`, also the same model with every matrix
    dequantised by the reference unpacking as an ordinary f32 folder. replace {module: parts}
    and quant_config_ take the place of those the case would make; fast draws the parts
    directly (random_parts). Returns {module: parts}."""
    method, bits, group, sym, desc_act, fmt, _ = CASES[case]
    dim, ffn, heads, kv, n, voc = SHAPES[shape]
    n = layers or n
    vocab = vocab or voc
    hd = dim // heads
    rng = np.random.default_rng(seed)
    plain, ref, modules = {}, {}, {}

    def f16(*shape_, scale=1.0, base=0.0):
        return (base + scale * rng.standard_normal(shape_)).astype(np.float16)

    plain["model.embed_tokens.weight"] = f16(vocab, dim)
    plain["model.norm.weight"] = f16(dim, scale=0.1, base=1.0)
    plain["lm_head.weight"] = f16(vocab, dim, scale=dim ** -0.5)
    shapes = {"self_attn.q_proj": (dim, dim), "self_attn.k_proj": (kv * hd, dim),
              "self_attn.v_proj": (kv * hd, dim), "self_attn.o_proj": (dim, dim),
              "mlp.gate_proj": (ffn, dim), "mlp.up_proj": (ffn, dim), "mlp.down_proj": (dim, ffn)}
    quant = {}
    inputs = {"self_attn.k_proj": "self_attn.q_proj", "self_attn.v_proj": "self_attn.q_proj",
              "mlp.up_proj": "mlp.gate_proj"}
    for i in range(n):
        orders = {}  # act-order: one for each input (desc_act "apart": for each matrix)
        p = f"model.layers.{i}."
        plain[p + "input_layernorm.weight"] = f16(dim, scale=0.1, base=1.0)
        plain[p + "post_attention_layernorm.weight"] = f16(dim, scale=0.1, base=1.0)
        for lin in LINEARS:
            rows, cols = shapes[lin]
            key = lin if desc_act == "apart" else inputs.get(lin, lin)
            order = orders.setdefault(key, rng.permutation(cols)) if desc_act else None
            if fast:
                parts = random_parts(rng, case, rows, cols, order)
                for k, v in parts.items():
                    quant[p + lin + "." + k] = v
                continue
            w = (rng.standard_normal((rows, cols)) * cols ** -0.5).astype(np.float32)
            q, z, s, g_idx = quantise(rng, w, bits, group, sym, desc_act, coarse,
                                      fmt if method == "ct" else "f16", order)
            if replace and p + lin in replace:
                parts = replace[p + lin]
            elif method == "ct":
                parts = pack_ct(q, z, s, bits, sym, fmt, g_idx if desc_act else None)
            elif method == "awq":
                qweight, qzeros = pack_awq(q, z)
                parts = {"qweight": qweight, "qzeros": qzeros, "scales": s}
            else:
                qweight, qzeros = pack_gptq(q, z, bits, fmt == "gptq")
                parts = {"qweight": qweight, "qzeros": qzeros, "scales": s, "g_idx": g_idx}
            for k, v in parts.items():
                quant[p + lin + "." + k] = v
            modules[p + lin] = parts
            if reference:
                ref[p + lin + ".weight"] = unpack(case, parts)
    os.makedirs(out_dir, exist_ok=True)
    save_tensors({**plain, **quant}, os.path.join(out_dir, "model.safetensors"),
                 bf16=[k for k in quant if k.endswith(".weight_scale") and fmt == "bf16"])
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config(shape, n, vocab, quant_config_ or quant_config(case)), f, indent=1)
    if reference:
        os.makedirs(reference, exist_ok=True)
        save_file({**{k: v.astype(np.float32) for k, v in plain.items()}, **ref},
                  os.path.join(reference, "model.safetensors"))
        with open(os.path.join(reference, "config.json"), "w") as f:
            json.dump(config(shape, n, vocab), f, indent=1)
    return modules


if __name__ == "__main__":
    a = sys.argv[1:]
    opt = lambda k, d=None: a[a.index(k) + 1] if k in a else d
    layers, vocab = opt("--layers"), opt("--vocab")
    write(a[0], a[1], opt("--shape", "tiny"), int(layers) if layers else None,
          reference=opt("--reference"), vocab=int(vocab) if vocab else None, fast="--fast" in a)
