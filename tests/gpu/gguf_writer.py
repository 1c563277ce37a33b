"""A minimal GGUF v3 writer (docs/gguf.md of ggml) for test models: metadata of scalar and
string types and tensors in f32/f16/bf16, written from numpy/torch arrays. Ours, for tests
only; it also stores a Hugging Face Llama the way llama.cpp's converter does (q and k rows
permuted for interleaved rotary pairs, llama.cpp's tensor names)."""
import struct

import numpy as np

U32, I32, F32, BOOL, STRING, ARRAY, U64 = 4, 5, 6, 7, 8, 9, 10
GGML_F32, GGML_F16, GGML_BF16 = 0, 1, 30
ALIGN = 32


def _str(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def _value(v):
    if isinstance(v, bool):
        return struct.pack("<I", BOOL) + struct.pack("<B", v)
    if isinstance(v, int):
        return struct.pack("<I", U32) + struct.pack("<I", v)
    if isinstance(v, float):
        return struct.pack("<I", F32) + struct.pack("<f", v)
    if isinstance(v, str):
        return struct.pack("<I", STRING) + _str(v)
    raise TypeError(type(v))


def write(path, metadata, tensors):
    """metadata: {key: int|float|str|bool}; tensors: [(name, ggml_type, raw bytes, shape)]
    with shape outermost first (as numpy), stored innermost first as GGUF wants."""
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(metadata))
    for k, v in metadata.items():
        head += _str(k) + _value(v)
    offset = 0
    infos = b""
    for name, gtype, raw, shape in tensors:
        infos += _str(name) + struct.pack("<I", len(shape))
        for d in reversed(shape):
            infos += struct.pack("<Q", d)
        infos += struct.pack("<IQ", gtype, offset)
        offset += (len(raw) + ALIGN - 1) // ALIGN * ALIGN
    head += infos
    with open(path, "wb") as f:
        f.write(head)
        f.write(b"\0" * ((-len(head)) % ALIGN))
        for _, _, raw, _ in tensors:
            f.write(raw)
            f.write(b"\0" * ((-len(raw)) % ALIGN))


def _permute(w, n_head):
    """llama.cpp's converter: rows of each head reordered so that rotating adjacent pairs
    (2i, 2i+1) equals rotate_half on the original rows."""
    rows, cols = w.shape
    return w.reshape(n_head, 2, rows // n_head // 2, cols).swapaxes(1, 2).reshape(rows, cols)


def llama_to_gguf(model, path, dtype="bf16"):
    """Write a transformers LlamaForCausalLM as a GGUF llama (tensors in dtype; norms f32)."""
    import torch

    c = model.config
    sd = {k: v.detach().to("cpu") for k, v in model.state_dict().items()}
    hd = c.hidden_size // c.num_attention_heads
    meta = {
        "general.architecture": "llama",
        "general.name": "thincuda test model",
        "llama.block_count": c.num_hidden_layers,
        "llama.context_length": c.max_position_embeddings,
        "llama.embedding_length": c.hidden_size,
        "llama.feed_forward_length": c.intermediate_size,
        "llama.attention.head_count": c.num_attention_heads,
        "llama.attention.head_count_kv": c.num_key_value_heads,
        "llama.rope.freq_base": float(getattr(c, "rope_theta", None) or c.rope_parameters["rope_theta"]),
        "llama.rope.dimension_count": hd,
        "llama.attention.layer_norm_rms_epsilon": float(c.rms_norm_eps),
    }
    gt = {"f32": GGML_F32, "f16": GGML_F16, "bf16": GGML_BF16}[dtype]
    tt = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[dtype]

    def mat(t):
        t = t.to(tt).contiguous()
        raw = t.view(torch.int16).numpy().tobytes() if dtype != "f32" else t.numpy().tobytes()
        return gt, raw, list(t.shape)

    def vec(t):
        t = t.to(torch.float32).contiguous()
        return GGML_F32, t.numpy().tobytes(), list(t.shape)

    out = [("token_embd.weight",) + mat(sd["model.embed_tokens.weight"])]
    rp = getattr(c, "rope_scaling", None) or getattr(c, "rope_parameters", None) or {}
    if rp.get("rope_type") == "llama3":
        # llama.cpp stores Llama 3 scaling as per-frequency factors.
        base = meta["llama.rope.freq_base"]
        inv = 1.0 / base ** (np.arange(0, hd, 2, dtype=np.float64) / hd)
        wl = 2 * np.pi / inv
        lo, hi, f, orig = rp["low_freq_factor"], rp["high_freq_factor"], rp["factor"], rp["original_max_position_embeddings"]
        smooth = (orig / wl - lo) / (hi - lo)
        fac = np.where(wl < orig / hi, 1.0, np.where(wl > orig / lo, f, 1.0 / ((1 - smooth) / f + smooth)))
        out.append(("rope_freqs.weight", GGML_F32, fac.astype(np.float32).tobytes(), [hd // 2]))
    for i in range(c.num_hidden_layers):
        p = f"model.layers.{i}."
        q = _permute(sd[p + "self_attn.q_proj.weight"], c.num_attention_heads)
        k = _permute(sd[p + "self_attn.k_proj.weight"], c.num_key_value_heads)
        out += [
            (f"blk.{i}.attn_norm.weight",) + vec(sd[p + "input_layernorm.weight"]),
            (f"blk.{i}.attn_q.weight",) + mat(q),
            (f"blk.{i}.attn_k.weight",) + mat(k),
            (f"blk.{i}.attn_v.weight",) + mat(sd[p + "self_attn.v_proj.weight"]),
            (f"blk.{i}.attn_output.weight",) + mat(sd[p + "self_attn.o_proj.weight"]),
            (f"blk.{i}.ffn_norm.weight",) + vec(sd[p + "post_attention_layernorm.weight"]),
            (f"blk.{i}.ffn_gate.weight",) + mat(sd[p + "mlp.gate_proj.weight"]),
            (f"blk.{i}.ffn_up.weight",) + mat(sd[p + "mlp.up_proj.weight"]),
            (f"blk.{i}.ffn_down.weight",) + mat(sd[p + "mlp.down_proj.weight"]),
        ]
    out.append(("output_norm.weight",) + vec(sd["model.norm.weight"]))
    if not c.tie_word_embeddings:
        out.append(("output.weight",) + mat(sd["lm_head.weight"]))
    write(path, meta, out)
