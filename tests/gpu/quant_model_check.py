#!/usr/bin/env python3
"""A quantised GGUF written by our own tool (tests/gpu/gguf_writer.py) from a random-weight
Llama: token embedding Q8_0, attention Q4_0 (read directly by the kernels), feed-forward gate
and up Q4_K, down Q6_K (dequantised on load). Our CUDA backend (f32 and bf16) against our CPU
backend on the same 64 + 32 ids: the greedy choice (argmax) at every step and the relative
error of the logits.
Usage: quant_model_check.py LOGITS_BINARY WORKDIR [--layers N]"""
import os
import subprocess
import sys

import numpy as np
import torch
from transformers import LlamaConfig, LlamaForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_writer as W  # noqa: E402

PROMPT, STEPS = 64, 32


def main():
    binary, work = sys.argv[1], sys.argv[2]
    layers = int(sys.argv[sys.argv.index("--layers") + 1]) if "--layers" in sys.argv else 4
    os.makedirs(work, exist_ok=True)
    # Llama-3.2-1B's widths (K-quants need rows of whole 256-element blocks), fewer layers.
    cfg = LlamaConfig(hidden_size=2048, intermediate_size=8192, num_hidden_layers=layers, num_attention_heads=32,
                      num_key_value_heads=8, vocab_size=32000, rope_theta=500000.0, tie_word_embeddings=True,
                      max_position_embeddings=8192, rms_norm_eps=1e-5)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).eval()
    types = {"token_embd": W.GGML_Q8_0, "attn_q": W.GGML_Q4_0, "attn_k": W.GGML_Q4_0, "attn_v": W.GGML_Q4_0,
             "attn_output": W.GGML_Q4_0, "ffn_gate": W.GGML_Q4_K, "ffn_up": W.GGML_Q4_K, "ffn_down": W.GGML_Q6_K}
    path = os.path.join(work, "quant.gguf")
    W.llama_to_gguf(model, path, "f32", types)
    ids = torch.randint(0, cfg.vocab_size, (PROMPT + STEPS,), generator=torch.Generator().manual_seed(2),
                        dtype=torch.int32)
    ids_path = os.path.join(work, "quant.ids")
    ids.numpy().tofile(ids_path)
    out = {}
    for dev, act in (("cpu", "f32"), ("cuda", "f32"), ("cuda", "bf16")):
        o = os.path.join(work, f"quant.{dev}.{act}.logits")
        r = subprocess.run([binary, path, dev, act, str(PROMPT), ids_path, o], capture_output=True, text=True)
        print(r.stdout.strip(), r.stderr.strip(), flush=True)
        if r.returncode:
            print(f"{dev} {act}: run failed")
            sys.exit(1)
        out[(dev, act)] = np.fromfile(o, dtype=np.float32).reshape(-1, cfg.vocab_size)
    ref = out[("cpu", "f32")]
    failed = 0
    print(f"\n{'ours':10} {'max rel err vs cpu':>19} {'same argmax':>12}  result")
    for key in (("cuda", "f32"), ("cuda", "bf16")):
        got = out[key]
        rel = max(float(np.linalg.norm(got[s] - ref[s]) / np.linalg.norm(ref[s])) for s in range(len(ref)))
        same = int((got.argmax(1) == ref.argmax(1)).sum())
        ok = np.isfinite(got).all() and (same == len(ref) if key[1] == "f32" else rel < 5e-2)
        failed += not ok
        print(f"{key[0]} {key[1]:5} {rel:19.2e} {same:>8}/{len(ref)}  {'ok' if ok else 'FAIL'}")
    print(f"{2 - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
