#!/usr/bin/env python3
"""Hand-made malformed quantised models, each run through `thincuda info` and `thincuda generate
--device cpu`: generate must end with one clear error line and a non-zero exit, never a signal
(info reads the header only: it may also succeed where only loading the weights finds the fault).
Hugging Face folders (GPTQ, AWQ, compressed-tensors from tests/model/quant_hf.py, one layer 128
wide, vocabulary 256, a byte-level tokenizer.json) and GGUF files (one layer 256 wide, blocks
from tests/gpu/quant_gguf.py, a byte-level tokenizer). Cases marked ok are valid edge cases that
must load and generate. Each case is also written as a fuzz input (OUT/fuzz-hfquant/NAME,
OUT/fuzz-ggufload/NAME) for the sanitizer builds: build-fuzz/fuzz_hfquant OUT/fuzz-hfquant/*.
Usage: malformed.py OUT_DIR [THINCUDA] [CASE...]"""
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "model"))
sys.path.insert(0, os.path.join(ROOT, "tests", "gpu"))
import quant_gguf as QG  # noqa: E402
import quant_hf as QH  # noqa: E402

QH.SHAPES["cli"] = (128, 128, 2, 1, 1, 256)
QH.CASES["gptq-g96"] = ("gptq", 4, 96, True, False, "gptq", "q4_0")
QH.CASES["ct-g96-asym"] = ("ct", 4, 96, False, False, "f16", "q4_1")
L0 = "model.layers.0.self_attn.q_proj."
K0 = "model.layers.0.self_attn.k_proj."


def tokenizer_json():
    chars = QG.byte_tokens(256)
    bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    return {"version": "1.0", "added_tokens": [], "normalizer": None, "pre_tokenizer": bl,
            "post_processor": None, "decoder": bl,
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "fuse_unk": False,
                      "byte_fallback": False, "ignore_merges": False,
                      "vocab": {c: i for i, c in enumerate(chars)}, "merges": []}}


def load_st(path):
    """{name: array} of a safetensors file, BF16 tensors as (exact) f32."""
    b = open(path, "rb").read()
    n = int.from_bytes(b[:8], "little")
    types = {"F32": np.float32, "F16": np.float16, "I32": np.int32, "I64": np.int64,
             "BF16": np.uint16}
    t = {}
    for k, v in json.loads(b[8:8 + n]).items():
        if k == "__metadata__":
            continue
        lo, hi = v["data_offsets"]
        a = np.frombuffer(b[8 + n + lo:8 + n + hi], types[v["dtype"]]).reshape(v["shape"])
        t[k] = (a.astype(np.uint32) << 16).view(np.float32) if v["dtype"] == "BF16" else a.copy()
    return t


def st_bytes(t, header_edit=None):
    """safetensors bytes of {name: array}; header_edit may change the JSON header dict."""
    header, blobs, off = {}, [], 0
    for name in sorted(t):
        v = np.ascontiguousarray(t[name])
        b = v.tobytes()
        header[name] = {"dtype": QH.ST_DTYPES[v.dtype], "shape": list(v.shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    if header_edit:
        header_edit(header)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    return len(h).to_bytes(8, "little") + h + b"".join(blobs)


def set_(d, k, v):
    d[k] = v


def qc(c):
    return c["quantization_config"]


def ctw(c):
    return qc(c)["config_groups"]["group_0"]["weights"]


def dup_layer(t):
    """Every part of layer 0's q_proj also under "model.layers.00." (not a layer number: the
    copies are not read, and the model loads)."""
    for k in [k for k in t if k.startswith(L0)]:
        t[k.replace("layers.0.", "layers.00.")] = t[k].copy()


def dup_down(t):
    """The act-order ffn_down also under "model.layers.00." (not read: once its gate and up were
    ordered twice)."""
    p = "model.layers.0.mlp.down_proj."
    for k in [k for k in t if k.startswith(p)]:
        t[k.replace("layers.0.", "layers.00.")] = t[k].copy()


def extra_layers(t):
    """input_layernorm of layers 1 to 99 beside layer 0's (config.json keeps 1 layer, as when a
    model is cut short): more tensor names than the view's name storage holds for one layer."""
    for i in range(1, 100):
        t[f"model.layers.{i}.input_layernorm.weight"] = t["model.layers.0.input_layernorm.weight"]


def shuffle_groups_by_16(t):
    """Act-order g_idx whose groups are 16 inputs (not whole blocks): held as f32."""
    g = t[L0 + "g_idx"]
    t[L0 + "g_idx"] = (np.arange(g.size) // 16 % (g.max() + 1)).astype(np.int32)


# name: (quant_hf case, tensors edit, config edit, raw safetensors edit, ok)
HF = {
    "hf-valid-gptq-sym4": ("gptq-sym4", None, None, None, True),
    "hf-qweight-wrong-shape": ("gptq-sym4", lambda t: set_(t, L0 + "qweight", t[L0 + "qweight"][:8]), None, None, False),
    "hf-qweight-1d": ("gptq-sym4", lambda t: set_(t, L0 + "qweight", t[L0 + "qweight"].reshape(-1)), None, None, False),
    "hf-qweight-i64": ("gptq-sym4", lambda t: set_(t, L0 + "qweight", t[L0 + "qweight"].astype(np.int64)), None, None, False),
    "hf-qzeros-missing": ("gptq-sym4", lambda t: t.pop(L0 + "qzeros"), None, None, False),
    "hf-qweight-missing": ("gptq-sym4", lambda t: t.pop(L0 + "qweight"), None, None, False),
    "hf-scales-f32": ("gptq-sym4", lambda t: set_(t, L0 + "scales", t[L0 + "scales"].astype(np.float32)), None, None, False),
    "hf-ct-scales-i32": ("ct-w4a16", lambda t: set_(t, K0 + "weight_scale", t[K0 + "weight_scale"].astype(np.int32)), None, None, False),
    "hf-g_idx-out-of-range": ("gptq-desc", lambda t: t[L0 + "g_idx"].__setitem__(5, 99), None, None, False),
    "hf-g_idx-negative": ("gptq-desc", lambda t: t[L0 + "g_idx"].__setitem__(5, -1), None, None, False),
    "hf-g_idx-short": ("gptq-desc", lambda t: set_(t, L0 + "g_idx", t[L0 + "g_idx"][:-1]), None, None, False),
    "hf-g_idx-groups-of-16": ("gptq-desc", shuffle_groups_by_16, None, None, True),
    "hf-desc_act-without-g_idx": ("gptq-desc", lambda t: t.pop(L0 + "g_idx"), None, None, False),
    "hf-bits-3": ("gptq-sym4", None, lambda c: qc(c).update(bits=3), None, False),
    "hf-bits-8-on-4-bit-data": ("gptq-sym4", None, lambda c: qc(c).update(bits=8), None, False),
    "hf-group-size-0": ("gptq-sym4", None, lambda c: qc(c).update(group_size=0), None, False),
    "hf-group-size-48": ("gptq-sym4", None, lambda c: qc(c).update(group_size=48), None, False),
    "hf-group-size-2^20": ("gptq-sym4", None, lambda c: qc(c).update(group_size=1 << 20), None, False),
    "hf-group-size-96-valid": ("gptq-g96", None, None, None, True),
    "hf-ct-group-size-96-valid": ("ct-g96-asym", None, None, None, True),
    "hf-awq-group-96": ("awq", None, lambda c: qc(c).update(group_size=96), None, False),
    "hf-ct-group-size-0": ("ct-w4a16", None, lambda c: ctw(c).update(group_size=0), None, False),
    "hf-ct-zero-point-but-symmetric": ("ct-w4a16-asym", None, lambda c: ctw(c).update(symmetric=True), None, False),
    "hf-ct-weight_shape-huge": ("ct-w4a16", lambda t: set_(t, K0 + "weight_shape", np.array([1 << 24, 1 << 24], np.int64)), None, None, False),
    "hf-ct-weight_shape-negative": ("ct-w4a16", lambda t: set_(t, K0 + "weight_shape", np.array([-1, 128], np.int64)), None, None, False),
    "hf-ct-weight_shape-3": ("ct-w4a16", lambda t: set_(t, K0 + "weight_shape", np.array([64, 128, 1], np.int64)), None, None, False),
    "hf-ct-weight_shape-odd-in": ("ct-w4a16", lambda t: set_(t, K0 + "weight_shape", np.array([64, 121], np.int64)), None, None, False),
    "hf-hidden-size-65536": ("gptq-sym4", None, lambda c: c.update(hidden_size=65536), None, False),
    "hf-vocab-2^31": ("gptq-sym4", None, lambda c: c.update(vocab_size=2147483646), None, False),
    "hf-layers-1024": ("gptq-sym4", None, lambda c: c.update(num_hidden_layers=1024), None, False),
    "hf-heads-1024-head_dim-1024": ("gptq-sym4", None, lambda c: c.update(num_attention_heads=1024, num_key_value_heads=1024, head_dim=1024), None, False),
    "hf-truncated": ("gptq-sym4", None, None, lambda b: b[:-1000], False),
    "hf-header-length-huge": ("gptq-sym4", None, None, lambda b: (1 << 62).to_bytes(8, "little") + b[8:], False),
    "hf-duplicate-module-layers.00": ("gptq-sym4", dup_layer, None, None, True),
    "hf-duplicate-act-order-down": ("gptq-desc", dup_down, None, None, True),
    "hf-extra-layers": ("gptq-sym4", extra_layers, None, None, True),
    "hf-scales-inf-nan": ("gptq-asym4", lambda t: t[L0 + "scales"].__setitem__((0, slice(0, 4)), [np.inf, -np.inf, np.nan, 65504]), None, None, True),
}


def write_hf(out, name, case, edit_t, edit_c, edit_raw):
    d = os.path.join(out, name)
    with tempfile.TemporaryDirectory() as tmp:
        QH.write(tmp, case, "cli", seed=3)
        t = load_st(os.path.join(tmp, "model.safetensors"))
        c = json.load(open(os.path.join(tmp, "config.json")))
    if edit_t:
        edit_t(t)
    if edit_c:
        edit_c(c)
    raw = st_bytes(t)
    if edit_raw:
        raw = edit_raw(raw)
    os.makedirs(d, exist_ok=True)
    cfg = json.dumps(c, indent=1).encode()
    open(os.path.join(d, "config.json"), "wb").write(cfg)
    open(os.path.join(d, "model.safetensors"), "wb").write(raw)
    json.dump(tokenizer_json(), open(os.path.join(d, "tokenizer.json"), "w"))
    fz = os.path.join(out, "fuzz-hfquant")
    os.makedirs(fz, exist_ok=True)
    open(os.path.join(fz, name), "wb").write(struct.pack("<I", len(cfg)) + cfg + raw)
    return d


# ---------------------------------------------------------------- GGUF

DIM, FFN, HD, VOC = 256, 256, 32, 256


def gguf_tensors(mix="Q4_K_M", layers=1):
    rng = np.random.default_rng(0)

    def vec(name, n):
        return {"name": name, "type": 0, "shape": [n],
                "raw": (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32).tobytes()}

    def mat(name, kind, r, c, i=0):
        tid, raw, shape = QG.random_matrix(rng, QG.mix_type(mix, kind, i, layers), r, c)
        return {"name": name, "type": tid, "shape": shape, "raw": raw}

    out = [mat("token_embd.weight", "token_embd", VOC, DIM)]
    for i in range(layers):
        b = f"blk.{i}."
        out += [vec(b + "attn_norm.weight", DIM), mat(b + "attn_q.weight", "attn_q", HD, DIM, i),
                mat(b + "attn_k.weight", "attn_k", HD, DIM, i), mat(b + "attn_v.weight", "attn_v", HD, DIM, i),
                mat(b + "attn_output.weight", "attn_output", DIM, HD, i), vec(b + "ffn_norm.weight", DIM),
                mat(b + "ffn_gate.weight", "ffn_gate", FFN, DIM, i), mat(b + "ffn_up.weight", "ffn_up", FFN, DIM, i),
                mat(b + "ffn_down.weight", "ffn_down", DIM, FFN, i)]
    out += [vec("output_norm.weight", DIM), mat("output.weight", "output", VOC, DIM)]
    return out


def gguf_meta(layers=1):
    a = "llama"
    return {"general.architecture": a, "general.name": "malformed", f"{a}.block_count": layers,
            f"{a}.context_length": 256, f"{a}.embedding_length": DIM,
            f"{a}.feed_forward_length": FFN, f"{a}.attention.head_count": 1,
            f"{a}.attention.head_count_kv": 1, f"{a}.attention.key_length": HD,
            f"{a}.attention.value_length": HD, f"{a}.rope.freq_base": 10000.0,
            f"{a}.attention.layer_norm_rms_epsilon": 1e-5, "tokenizer.ggml.model": "gpt2",
            "tokenizer.ggml.tokens": QG.byte_tokens(VOC), "tokenizer.ggml.merges": []}


def gguf_bytes(meta, tensors, align=32):
    """A GGUF v3 image; a tensor's "offset" (else packed in order) and "dims" (innermost first,
    else its shape reversed) are written as given, its "raw" bytes only where "offset" is
    not given."""
    import gguf_writer as W
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(meta))
    for k, v in meta.items():
        head += W._str(k) + W._value(v)
    off, data = 0, b""
    for t in tensors:
        dims = t.get("dims") or list(reversed(t["shape"]))
        head += W._str(t["name"]) + struct.pack("<I", len(dims))
        head += b"".join(struct.pack("<Q", d) for d in dims)
        if "offset" in t:
            head += struct.pack("<IQ", t["type"], t["offset"])
            continue
        head += struct.pack("<IQ", t["type"], off)
        pad = (-len(t["raw"])) % align
        data += t["raw"] + b"\0" * pad
        off += len(t["raw"]) + pad
    head += b"\0" * ((-len(head)) % align)
    return head + data


def find(ts, name):
    return next(t for t in ts if t["name"] == name)


def g_set(name, **kw):
    return lambda m, ts: find(ts, name).update(kw)


def g_meta(**kw):
    return lambda m, ts: m.update({k.replace("__", "."): v for k, v in kw.items()})


def g_raw_cut(n):
    return ("raw", lambda b: b[:-n])


def f64_overflow(m, ts):
    """A 1-D F64 tensor of 2^61 + 1 elements: 8 (2^61 + 1) bytes wrap to 8 in uint64."""
    ts.append({"name": "huge.f64", "type": 28, "shape": [(1 << 61) + 1], "raw": b"\0" * 8})


def norms_q8(m, ts):
    t = find(ts, "blk.0.attn_norm.weight")
    tid, raw, shape = QG.random_matrix(np.random.default_rng(5), "Q8_0", 1, DIM)
    t.update(type=tid, raw=raw, shape=[DIM])


def i32_matrix(m, ts):
    t = find(ts, "blk.0.attn_q.weight")
    t.update(type=26, raw=np.zeros(HD * DIM, np.int32).tobytes())


def q4_0_row_48(m, ts):
    t = find(ts, "blk.0.attn_q.weight")
    t.update(type=2, shape=[HD, 48], raw=b"\0" * (HD * 48 // 32 * 18 + 18))


# name: (mix, edit of (meta, tensors) or ("raw", edit of the bytes), ok)
GGUF = {
    "gguf-valid-q4_k_m": ("Q4_K_M", None, True),
    "gguf-valid-iq": ("IQ", None, True),
    "gguf-row-not-whole-blocks": ("Q4_0", q4_0_row_48, False),
    "gguf-offset-past-eof": ("Q4_K_M", g_set("output.weight", offset=1 << 40), False),
    "gguf-offset-unaligned": ("Q4_K_M", g_set("output.weight", offset=3), False),
    "gguf-truncated": ("Q4_K_M", g_raw_cut(100), False),
    "gguf-type-99": ("Q4_K_M", g_set("blk.0.attn_q.weight", type=99), False),
    "gguf-type-37-q4_1_g128": ("Q4_K_M", g_set("blk.0.attn_q.weight", type=37), False),
    "gguf-q4_k-shape-vs-config": ("Q4_K_M", g_set("blk.0.attn_q.weight", dims=[DIM, HD // 2]), False),
    "gguf-token_embd-3d": ("Q4_K_M", g_set("token_embd.weight", dims=[DIM, VOC // 2, 2]), False),
    "gguf-norm-q8_0-valid": ("Q4_K_M", norms_q8, True),
    "gguf-i32-matrix": ("Q4_K_M", i32_matrix, False),
    "gguf-f64-size-overflow": ("Q4_K_M", f64_overflow, False),
    "gguf-block_count-1024": ("Q4_K_M", g_meta(llama__block_count=1024), False),
    "gguf-key_length-512-heads-1024": ("Q4_K_M", g_meta(llama__attention__head_count=1024, llama__attention__head_count_kv=1024, llama__attention__key_length=512, llama__attention__value_length=512), False),
    "gguf-dim-65536": ("Q4_K_M", g_meta(llama__embedding_length=65536), False),
}


def write_gguf(out, name, mix, edit):
    meta, ts = gguf_meta(), gguf_tensors(mix)
    raw_edit = None
    if isinstance(edit, tuple):
        raw_edit = edit[1]
    elif edit:
        edit(meta, ts)
    b = gguf_bytes(meta, ts)
    if raw_edit:
        b = raw_edit(b)
    p = os.path.join(out, name + ".gguf")
    open(p, "wb").write(b)
    fz = os.path.join(out, "fuzz-ggufload")
    os.makedirs(fz, exist_ok=True)
    open(os.path.join(fz, name), "wb").write(b)
    return p


def run(exe, args):
    try:
        r = subprocess.run([exe] + args, capture_output=True, text=True, timeout=300,
                           errors="replace")
    except subprocess.TimeoutExpired:
        return None, "timeout"
    return r.returncode, r.stderr


def main():
    out = sys.argv[1]
    exe = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "build-dev", "src", "cli", "thincuda")
    only = set(sys.argv[3:])
    os.makedirs(out, exist_ok=True)
    bad = 0
    for name, spec in {**HF, **GGUF}.items():
        if only and name not in only:
            continue
        if name in HF:
            case, et, ec, er, ok = spec
            path = write_hf(out, name, case, et, ec, er)
        else:
            mix, edit, ok = spec
            path = write_gguf(out, name, mix, edit)
        for cmd in (["info", "--model", path, "--device", "cpu"],
                    ["generate", "--device", "cpu", "--model", path, "-p", "hi", "-n", "3",
                     "--temperature", "0"]):
            rc, err = run(exe, cmd)
            lines = [x for x in err.splitlines() if x.strip() and not x.startswith("[")]
            if ok:
                good = rc == 0
            elif cmd[0] == "info" and rc == 0:
                good = True
            else:
                good = rc is not None and 0 < rc < 128 and len(lines) == 1
            bad += not good
            print(f"{'ok ' if good else 'BAD'} {name:34} {cmd[0]:8} rc={rc} "
                  f"{' | '.join(lines)[:300] if lines else ''}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
