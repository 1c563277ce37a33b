"""A minimal GGUF v3 writer (docs/gguf.md of ggml) for test models: metadata of scalar and
string types (and arrays of strings or of int32) and tensors in f32/f16/bf16, written from numpy/torch arrays. Ours, for tests
only; it also stores a Hugging Face Llama, Mistral or Qwen2 the way llama.cpp's converter does
(a Llama's q and k rows permuted for interleaved rotary pairs, llama.cpp's tensor names)."""
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
    if isinstance(v, list) and all(isinstance(x, str) for x in v):
        return struct.pack("<IIQ", ARRAY, STRING, len(v)) + b"".join(_str(x) for x in v)
    if isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        return struct.pack("<IIQ", ARRAY, I32, len(v)) + struct.pack(f"<{len(v)}i", *v)
    raise TypeError(type(v))


def write(path, metadata, tensors):
    """metadata: {key: int|float|str|bool|[str]|[int]}; tensors: [(name, ggml_type, raw bytes, shape)]
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


def _bf16_bits(a):
    """float32 array -> bfloat16 bit patterns (uint16), rounded to nearest even."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def llama_to_gguf(model, path, dtype="bf16", types=None):
    """Write a transformers Llama, Mistral or Qwen2 model (LlamaForCausalLM,
    MistralForCausalLM, Qwen2ForCausalLM) as llama.cpp's converter would (state_to_gguf)."""
    c = model.config
    sd = {k: v.detach().to("cpu").float().numpy() for k, v in model.state_dict().items()}
    cfg = c.to_dict()
    cfg["rope_theta"] = float(getattr(c, "rope_theta", None) or c.rope_parameters["rope_theta"])
    cfg["rope_scaling"] = getattr(c, "rope_scaling", None) or getattr(c, "rope_parameters", None)
    state_to_gguf(c.model_type, cfg, sd, path, dtype, types)


def state_to_gguf(arch, c, sd, path, dtype="bf16", types=None, extra=None):
    """Write a model of architecture arch ("llama", "mistral" or "qwen2") from its Hugging Face
    config.json values c (a dict) and state dict sd (float32 numpy arrays) as a GGUF with
    llama.cpp's tensor names: matrices in dtype (f32/f16/bf16), or the quantised ggml type that
    types maps their kind to ("token_embd", "attn_q", "ffn_down", ...; encoded by quantize());
    norms and biases f32. A Llama's or Mistral's q and k rows are permuted for interleaved
    rotary pairs as llama.cpp's converter does; a Qwen2's stay as they are (llama.cpp rotates
    them as rotate_half does). head_dim, when the configuration gives it, is written as
    key_length and value_length; Mistral's sliding_window as attention.sliding_window. extra:
    more metadata (a vocabulary's tokenizer.* keys)."""
    types = types or {}
    heads, kv = c["num_attention_heads"], c.get("num_key_value_heads") or c["num_attention_heads"]
    hd = c.get("head_dim") or c["hidden_size"] // heads
    rp = c.get("rope_scaling") or c.get("rope_parameters") or {}
    theta = float(c.get("rope_theta") or rp["rope_theta"])
    meta = {
        "general.architecture": arch,
        "general.name": "thincuda test model",
        f"{arch}.block_count": c["num_hidden_layers"],
        f"{arch}.context_length": c["max_position_embeddings"],
        f"{arch}.embedding_length": c["hidden_size"],
        f"{arch}.feed_forward_length": c["intermediate_size"],
        f"{arch}.attention.head_count": heads,
        f"{arch}.attention.head_count_kv": kv,
        f"{arch}.rope.freq_base": theta,
        f"{arch}.rope.dimension_count": hd,
        f"{arch}.attention.layer_norm_rms_epsilon": float(c["rms_norm_eps"]),
    }
    if c.get("head_dim") and c["head_dim"] != c["hidden_size"] // heads:
        meta[f"{arch}.attention.key_length"] = hd
        meta[f"{arch}.attention.value_length"] = hd
    if arch == "mistral" and c.get("sliding_window"):
        meta[f"{arch}.attention.sliding_window"] = c["sliding_window"]
    meta.update(extra or {})
    gt = {"f32": GGML_F32, "f16": GGML_F16, "bf16": GGML_BF16}[dtype]

    def mat(t, kind=None):
        t = np.ascontiguousarray(t, dtype=np.float32)
        if kind in types:
            return types[kind], quantize(t, types[kind]), list(t.shape)
        raw = {"f32": lambda a: a.tobytes(), "f16": lambda a: a.astype(np.float16).tobytes(),
               "bf16": lambda a: _bf16_bits(a).tobytes()}[dtype](t)
        return gt, raw, list(t.shape)

    def vec(t):
        t = np.ascontiguousarray(t, dtype=np.float32)
        return GGML_F32, t.tobytes(), list(t.shape)

    out = [("token_embd.weight",) + mat(sd["model.embed_tokens.weight"], "token_embd")]
    if rp.get("rope_type") == "llama3":
        # llama.cpp stores Llama 3 scaling as per-frequency factors.
        inv = 1.0 / theta ** (np.arange(0, hd, 2, dtype=np.float64) / hd)
        wl = 2 * np.pi / inv
        lo, hi, f, orig = rp["low_freq_factor"], rp["high_freq_factor"], rp["factor"], rp["original_max_position_embeddings"]
        smooth = (orig / wl - lo) / (hi - lo)
        fac = np.where(wl < orig / hi, 1.0, np.where(wl > orig / lo, f, 1.0 / ((1 - smooth) / f + smooth)))
        out.append(("rope_freqs.weight", GGML_F32, fac.astype(np.float32).tobytes(), [hd // 2]))
    qwen2 = arch == "qwen2"
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        q, k = sd[p + "self_attn.q_proj.weight"], sd[p + "self_attn.k_proj.weight"]
        if not qwen2:
            q, k = _permute(q, heads), _permute(k, kv)
        out += [
            (f"blk.{i}.attn_norm.weight",) + vec(sd[p + "input_layernorm.weight"]),
            (f"blk.{i}.attn_q.weight",) + mat(q, "attn_q"),
            (f"blk.{i}.attn_k.weight",) + mat(k, "attn_k"),
            (f"blk.{i}.attn_v.weight",) + mat(sd[p + "self_attn.v_proj.weight"], "attn_v"),
        ]
        if qwen2:
            out += [(f"blk.{i}.attn_{x}.bias",) + vec(sd[p + f"self_attn.{x}_proj.bias"]) for x in "qkv"]
        out += [
            (f"blk.{i}.attn_output.weight",) + mat(sd[p + "self_attn.o_proj.weight"], "attn_output"),
            (f"blk.{i}.ffn_norm.weight",) + vec(sd[p + "post_attention_layernorm.weight"]),
            (f"blk.{i}.ffn_gate.weight",) + mat(sd[p + "mlp.gate_proj.weight"], "ffn_gate"),
            (f"blk.{i}.ffn_up.weight",) + mat(sd[p + "mlp.up_proj.weight"], "ffn_up"),
            (f"blk.{i}.ffn_down.weight",) + mat(sd[p + "mlp.down_proj.weight"], "ffn_down"),
        ]
    out.append(("output_norm.weight",) + vec(sd["model.norm.weight"]))
    if not c.get("tie_word_embeddings"):
        out.append(("output.weight",) + mat(sd["lm_head.weight"], "output"))
    write(path, meta, out)


# ---------------------------------------------------------------- quantisation (ours)
GGML_Q4_0, GGML_Q8_0, GGML_Q4_K, GGML_Q6_K = 2, 8, 12, 14


def _f16(x):
    return np.asarray(x, dtype=np.float16).view(np.uint8).reshape(*np.shape(x), 2)


def quantize(w, gtype):
    """Encode a float32 array [rows, cols] as GGUF blocks of gtype (Q4_0, Q8_0, Q4_K, Q6_K):
    our own round-to-nearest encoders for the block layouts of ggml-common.h (any valid encoding
    serves: the loaders under test decode whatever the blocks say)."""
    w = np.asarray(w, dtype=np.float32)
    rows = w.reshape(-1, 256 if gtype in (GGML_Q4_K, GGML_Q6_K) else 32)
    n = rows.shape[0]
    if gtype == GGML_Q8_0:
        d = np.abs(rows).max(1) / 127
        inv = np.where(d > 0, 1 / np.where(d > 0, d, 1), 0)
        q = np.clip(np.rint(rows * inv[:, None]), -127, 127).astype(np.int8)
        return np.concatenate([_f16(d), q.view(np.uint8)], 1).tobytes()
    if gtype == GGML_Q4_0:
        idx = np.abs(rows).argmax(1)
        mx = rows[np.arange(n), idx]
        d = mx / -8
        inv = np.where(d != 0, 1 / np.where(d != 0, d, 1), 0)
        q = np.clip(np.rint(rows * inv[:, None]) + 8, 0, 15).astype(np.uint8)
        return np.concatenate([_f16(d), q[:, :16] | (q[:, 16:] << 4)], 1).tobytes()
    if gtype == GGML_Q4_K:
        sub = rows.reshape(n, 8, 32)
        lo = np.minimum(sub.min(2), 0)
        scale = (sub.max(2) - lo) / 15
        d = scale.max(1) / 63
        dmin = (-lo).max(1) / 63
        sc = np.clip(np.rint(scale / np.where(d > 0, d, 1)[:, None]), 0, 63).astype(np.uint8)
        mn = np.clip(np.rint(-lo / np.where(dmin > 0, dmin, 1)[:, None]), 0, 63).astype(np.uint8)
        d16, dm16 = np.float16(d).astype(np.float32), np.float16(dmin).astype(np.float32)
        step = (d16[:, None] * sc)[:, :, None]
        q = np.clip(np.rint((sub + (dm16[:, None] * mn)[:, :, None]) / np.where(step > 0, step, 1)), 0, 15)
        q = q.astype(np.uint8)
        s = np.zeros((n, 12), np.uint8)
        s[:, 0:4] = sc[:, 0:4] & 63
        s[:, 4:8] = mn[:, 0:4] & 63
        s[:, 8:12] = (sc[:, 4:8] & 15) | ((mn[:, 4:8] & 15) << 4)
        s[:, 0:4] |= (sc[:, 4:8] >> 4) << 6
        s[:, 4:8] |= (mn[:, 4:8] >> 4) << 6
        qs = (q[:, 0::2, :] | (q[:, 1::2, :] << 4)).reshape(n, 128)
        return np.concatenate([_f16(d), _f16(dmin), s, qs], 1).tobytes()
    if gtype == GGML_Q6_K:
        sub = rows.reshape(n, 16, 16)
        amax = np.abs(sub).max(2)
        scale = amax / 31
        d = scale.max(1) / 127
        sc = np.clip(np.rint(scale / np.where(d > 0, d, 1)[:, None]), -127, 127).astype(np.int8)
        d16 = np.float16(d).astype(np.float32)
        step = (d16[:, None] * sc)[:, :, None]
        q = np.clip(np.rint(sub / np.where(step != 0, step, 1)) + 32, 0, 63).astype(np.uint8).reshape(n, 2, 128)
        ql = np.zeros((n, 2, 64), np.uint8)
        qh = np.zeros((n, 2, 32), np.uint8)
        ql[:, :, :32] = (q[:, :, 0:32] & 15) | ((q[:, :, 64:96] & 15) << 4)
        ql[:, :, 32:] = (q[:, :, 32:64] & 15) | ((q[:, :, 96:128] & 15) << 4)
        qh[:] = ((q[:, :, 0:32] >> 4) | ((q[:, :, 32:64] >> 4) << 2) | ((q[:, :, 64:96] >> 4) << 4)
                 | ((q[:, :, 96:128] >> 4) << 6))
        return np.concatenate([ql.reshape(n, 128), qh.reshape(n, 64), sc.view(np.uint8), _f16(d)], 1).tobytes()
    raise ValueError(gtype)
