#!/usr/bin/env python3
"""Tiny random-weight models of the architectures beyond plain Llama (Qwen2's q/k/v biases,
Mistral's sliding window, head sizes other than hidden_size / heads), the same bytes on every
machine: weights from numpy's RandomState (whose streams numpy keeps stable), written as a
Hugging Face folder (config.json, model.safetensors) and as a GGUF the way llama.cpp's converter
writes each architecture. test_archs.py runs them on our CPU backend against the logits that
transformers computed on the CPU over the same folders, recorded in data/arch_expected.npz by
this script (transformers needs PyTorch, which CI does not install: PyPI has only its CUDA
build). Where torch and transformers are installed, test_archs.py recomputes them live.

Record (run from the repository root; needs torch, transformers, safetensors, numpy):

    python3 tests/model/arch_models.py
"""
import hashlib
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "gpu"))
import gguf_writer  # noqa: E402

EXPECTED = os.path.join(HERE, "data", "arch_expected.npz")
PROMPT, STEPS, VOCAB = 40, 8, 512

# name: (model_type, hidden_size, heads, kv heads, head_dim (None: hidden / heads), ffn,
#        layers, tied, sliding_window, rope_theta)
CASES = {
    # Qwen2.5's shape in small: GQA 2:1, tied embeddings, head size 80
    "qwen2-hd80": ("qwen2", 320, 4, 2, None, 640, 2, True, None, 1000000.0),
    # GQA 4:1, an output projection of its own, head size 96
    "qwen2-hd96": ("qwen2", 384, 4, 1, None, 512, 2, False, None, 1000000.0),
    # Mistral with a window shorter than the prompt, and head_dim 96 over 4 heads of a 256-wide
    # model (Mistral-Nemo's kind of head)
    "mistral-window": ("mistral", 256, 4, 2, 96, 512, 2, False, 16, 1000000.0),
    # Llama with head_dim 80 != 192 / 4
    "llama-hd80": ("llama", 192, 4, 4, 80, 384, 2, True, None, 10000.0),
}


def config(name):
    """config.json of a case, as transformers reads it."""
    mt, hidden, heads, kv, hd, ffn, layers, tied, window, theta = CASES[name]
    arch = {"qwen2": "Qwen2ForCausalLM", "mistral": "MistralForCausalLM",
            "llama": "LlamaForCausalLM"}[mt]
    c = {"architectures": [arch], "model_type": mt, "hidden_size": hidden,
         "intermediate_size": ffn, "num_hidden_layers": layers, "num_attention_heads": heads,
         "num_key_value_heads": kv, "vocab_size": VOCAB, "max_position_embeddings": 1024,
         "rms_norm_eps": 1e-6, "rope_theta": theta,
         "rope_parameters": {"rope_type": "default", "rope_theta": theta},
         "tie_word_embeddings": tied, "hidden_act": "silu", "torch_dtype": "float32",
         "bos_token_id": 1, "eos_token_id": 2}
    if hd is not None:
        c["head_dim"] = hd
    if mt == "mistral":
        c["sliding_window"] = window
    if mt == "qwen2":
        c.update(use_sliding_window=False, sliding_window=None, max_window_layers=layers)
    if mt == "llama":
        c.update(attention_bias=False, mlp_bias=False)
    return c


def head_dim(name):
    _, hidden, heads, _, hd, _, _, _, _, _ = CASES[name]
    return hd or hidden // heads


def weights(name, seed=0):
    """{Hugging Face name: float32 array}: matrices of variance 1/fan-in (activations keep their
    size through the layers), norm weights near 1, q/k/v biases of size 0.5 (large enough to
    matter to the logits)."""
    mt, hidden, heads, kv, _, ffn, layers, tied, _, _ = CASES[name]
    hd = head_dim(name)
    rs = np.random.RandomState(seed)

    def mat(rows, cols):
        return (rs.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)

    def norm(n):
        return (1 + 0.1 * rs.standard_normal(n)).astype(np.float32)

    sd = {"model.embed_tokens.weight": rs.standard_normal((VOCAB, hidden)).astype(np.float32)}
    for i in range(layers):
        p = f"model.layers.{i}."
        sd[p + "input_layernorm.weight"] = norm(hidden)
        sd[p + "self_attn.q_proj.weight"] = mat(heads * hd, hidden)
        sd[p + "self_attn.k_proj.weight"] = mat(kv * hd, hidden)
        sd[p + "self_attn.v_proj.weight"] = mat(kv * hd, hidden)
        if mt == "qwen2":
            for part, n in (("q", heads), ("k", kv), ("v", kv)):
                sd[p + f"self_attn.{part}_proj.bias"] = (0.5 * rs.standard_normal(n * hd)).astype(np.float32)
        sd[p + "self_attn.o_proj.weight"] = mat(hidden, heads * hd)
        sd[p + "post_attention_layernorm.weight"] = norm(hidden)
        sd[p + "mlp.gate_proj.weight"] = mat(ffn, hidden)
        sd[p + "mlp.up_proj.weight"] = mat(ffn, hidden)
        sd[p + "mlp.down_proj.weight"] = mat(hidden, ffn)
    sd["model.norm.weight"] = norm(hidden)
    if not tied:
        sd["lm_head.weight"] = mat(VOCAB, hidden)
    return sd


def ids(name):
    """The prompt followed by the ids fed one at a time, int32."""
    return np.random.RandomState(1 + sorted(CASES).index(name)).randint(
        0, VOCAB, PROMPT + STEPS).astype(np.int32)


def digest(sd):
    h = hashlib.sha256()
    for k in sorted(sd):
        h.update(k.encode())
        h.update(np.ascontiguousarray(sd[k]).tobytes())
    return h.hexdigest()


def write_folder(name, folder, sd=None):
    from safetensors.numpy import save_file

    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config(name), f, indent=1)
    save_file(sd if sd is not None else weights(name), os.path.join(folder, "model.safetensors"),
              metadata={"format": "pt"})


def write_gguf(name, path, sd=None, dtype="f32", extra=None):
    c = config(name)
    arch = c["model_type"]
    gguf_writer.state_to_gguf(arch, c, sd if sd is not None else weights(name), path, dtype,
                              extra=extra)


# ---------------------------------------------------------------- a Qwen2 vocabulary

# Qwen2's pre-tokenisation (its tokenizer.json's Split; llama.cpp's "qwen2"), its special tokens.
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CORPUS = ("The quick brown fox jumps over the lazy dog. I'm sure you'll find 12345 and 67890 in "
          "the numbers; she'd say they're fine. Tokenizers merge the most frequent pairs first, "
          "then the next, until the vocabulary is full. Hello world, hello there, hello again! "
          "Qwen and Mistral models share the Llama skeleton with a little more: biases, windows. "
          "Zwölf Boxkämpfer jagen Viktor quer über den großen Sylter Deich. 日本語のテキストと中文。")
# Text that NFC changes: decomposed accents, Hangul jamo, singletons (the Angstrom sign, a CJK
# compatibility ideograph), combining marks out of canonical order; around special tokens too.
NFC_TEXTS = ["Zwo\u0308lf Boxka\u0308mpfer u\u0308ber den gro\u00dfen Deich",
             "\u1112\u1161\u11ab\u1100\u1173\u11af and \u1100\u1161",
             "\u212b \uf900 e\u0301 A\u030a a\u0323\u0302 q\u0307\u0323",
             "<|im_start|>user\nZwo\u0308lf<|im_end|>\no\u0308"]


def byte_chars():
    """GPT-2's printable stand-in for each byte."""
    keep = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    out, extra = {}, 256
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(extra)
            extra += 1
    return [out[b] for b in range(256)]


def qwen2_vocab():
    """A byte-level BPE vocabulary of VOCAB tokens: the 256 bytes, merges learnt greedily from
    CORPUS (most frequent pair first, ties by text), then Qwen2's special tokens. Returns
    (tokens, merges)."""
    bc = byte_chars()
    words = {}
    for w in CORPUS.replace(" ", "\0 ").split("\0"):
        sym = tuple(bc[b] for b in w.encode())
        words[sym] = words.get(sym, 0) + 1
    tokens, merges = list(bc), []
    known = set(tokens)
    while len(tokens) < VOCAB - len(QWEN2_SPECIALS):
        pairs = {}
        for w, f in words.items():
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] = pairs.get((a, b), 0) + f
        pairs = {p: f for p, f in pairs.items() if p[0] + p[1] not in known}
        if not pairs:
            raise RuntimeError("CORPUS is too small for the vocabulary")
        a, b = min(pairs, key=lambda p: (-pairs[p], p))
        merges.append(a + " " + b)
        tokens.append(a + b)
        known.add(a + b)
        merged = {}
        for w, f in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and w[i] == a and w[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            merged[tuple(out)] = merged.get(tuple(out), 0) + f
        words = merged
    return tokens + QWEN2_SPECIALS, merges


def qwen2_tokenizer_metadata(template):
    """GGUF tokenizer keys for qwen2_vocab(), as llama.cpp writes a Qwen2 vocabulary."""
    tokens, merges = qwen2_vocab()
    n = len(tokens)
    return {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "qwen2",
            "tokenizer.ggml.tokens": tokens,
            "tokenizer.ggml.token_type": [1] * (n - 3) + [3, 3, 3],
            "tokenizer.ggml.merges": merges,
            "tokenizer.ggml.bos_token_id": n - 3, "tokenizer.ggml.eos_token_id": n - 1,
            "tokenizer.ggml.add_bos_token": False, "tokenizer.chat_template": template}


def qwen2_reference_tokenizer(nfc=True):
    """The same vocabulary as Hugging Face's tokenizers builds Qwen2's (NFC, then Split and
    ByteLevel); nfc=False: without its normalizer."""
    from tokenizers import AddedToken, Regex, Tokenizer, models, normalizers, pre_tokenizers

    tokens, merges = qwen2_vocab()
    vocab = {t: i for i, t in enumerate(tokens[:-len(QWEN2_SPECIALS)])}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[tuple(m.split(" ")) for m in merges]))
    if nfc:
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_REGEX), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in QWEN2_SPECIALS])
    return tok


# ---------------------------------------------------------------- the reference (torch)


def exact_rope():
    """Rotary angles in f64 for the three architectures (transformers computes them in f32):
    with the angles exact, our f32 CPU path and transformers' agree to about 1e-6."""
    import torch
    import transformers.models.llama.modeling_llama as llama
    import transformers.models.mistral.modeling_mistral as mistral
    import transformers.models.qwen2.modeling_qwen2 as qwen2

    def forward(self, x, position_ids):
        dim = self.inv_freq.shape[0] * 2
        c = self.config
        rp = getattr(c, "rope_parameters", None) or {}
        base = rp.get("rope_theta") or getattr(c, "rope_theta")
        inv = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
        freqs = position_ids.double()[..., None] * inv
        emb = torch.cat((freqs, freqs), -1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)

    for m in (llama.LlamaRotaryEmbedding, mistral.MistralRotaryEmbedding,
              qwen2.Qwen2RotaryEmbedding):
        m.forward = forward


def reference(name, folder):
    """transformers' f32 logits [STEPS + 1, VOCAB] after the prompt and after each fed id."""
    import torch
    from transformers import AutoModelForCausalLM

    exact_rope()
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    with torch.no_grad():
        out = model(torch.tensor(ids(name), dtype=torch.long)[None]).logits[0]
    return out[PROMPT - 1:].float().numpy()


def main():
    import tempfile

    import transformers

    rec = {"transformers": np.array(transformers.__version__)}
    for name in CASES:
        sd = weights(name)
        with tempfile.TemporaryDirectory() as d:
            write_folder(name, d, sd)
            rec[name + ".logits"] = reference(name, d)
        rec[name + ".sha256"] = np.array(digest(sd))
        print(name, rec[name + ".logits"].shape, file=sys.stderr)
    np.savez_compressed(EXPECTED, **rec)


if __name__ == "__main__":
    main()
