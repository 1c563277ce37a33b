#!/usr/bin/env python3
"""GPTQ, AWQ and compressed-tensors folders on CUDA against our CPU backend on the same folder:
random-weight Llamas at real shapes written by tests/model/quant_hf.py in each case it knows
(GPTQ symmetric and asymmetric 4-bit, per-column, gptq_v2, 8-bit, act-order; AWQ;
compressed-tensors W4A16 and W8A16), run over the same 64 + 32 ids as
tests/gpu/quant_model_check.py. CUDA with f32 activations must make the CPU's greedy choice
(argmax) at every step; with bf16 activations the logits' relative error is held under 5e-2 or
twice the CPU backend's own bf16 error on the same folder. AWQ cases whose group does not divide
a shape's dimension are left out (AutoAWQ cannot write them either). Skips, saying so, where
there is no GPU.
Usage: quant_hf_check.py LOGITS_BINARY WORKDIR [--layers N] [--shapes a,b] [--cases a,b]"""
import os
import shutil
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "model"))
import quant_hf as Q  # noqa: E402

PROMPT, STEPS, VOCAB = 64, 32, 32000


def main():
    a = sys.argv[1:]
    binary, work = a[0], a[1]
    opt = lambda k, d: a[a.index(k) + 1] if k in a else d
    layers = int(opt("--layers", "4"))
    shapes = opt("--shapes", "smollm2-135m,llama3.2-1b").split(",")
    cases = opt("--cases", ",".join(Q.CASES)).split(",")
    if shutil.which("nvidia-smi") is None or subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode:
        print("quant_hf_check: no GPU here (nvidia-smi finds none); skipped")
        print("0 passed, 0 failed, 1 skipped")
        return
    os.makedirs(work, exist_ok=True)
    failed = total = 0
    rows = []
    ids = np.random.default_rng(2).integers(0, VOCAB, PROMPT + STEPS).astype(np.int32)
    ids_path = os.path.join(work, "quant.ids")
    ids.tofile(ids_path)
    for shape in shapes:
        dim, ffn = Q.SHAPES[shape][:2]
        for case in cases:
            method, _, group = Q.CASES[case][:3]
            if method == "awq" and (dim % group or ffn % group):
                print(f"{shape} {case}: group {group} does not divide {dim} and {ffn}; left out")
                continue
            path = os.path.join(work, f"{shape}.{case}")
            Q.write(path, case, shape, layers=layers, vocab=VOCAB)
            out = {}
            for dev, act in (("cpu", "f32"), ("cpu", "bf16"), ("cuda", "f32"), ("cuda", "bf16")):
                o = os.path.join(work, f"{shape}.{case}.{dev}.{act}.logits")
                r = subprocess.run([binary, path, dev, act, str(PROMPT), ids_path, o], capture_output=True, text=True)
                print(f"{shape} {case} {dev} {act}: {(r.stdout + r.stderr).strip()}", flush=True)
                out[(dev, act)] = None if r.returncode else np.fromfile(o, dtype=np.float32).reshape(-1, VOCAB)
            ref, cpu16 = out[("cpu", "f32")], out[("cpu", "bf16")]
            err = lambda got: max(float(np.linalg.norm(got[s] - ref[s]) / np.linalg.norm(ref[s])) for s in range(len(ref)))
            bar = 5e-2 if ref is None or cpu16 is None else max(5e-2, 2 * err(cpu16))
            for key in (("cuda", "f32"), ("cuda", "bf16")):
                got = out[key]
                total += 1
                if ref is None or got is None:
                    failed += 1
                    rows.append((shape, case, key[1], float("nan"), float("nan"), 0, 0, "FAIL"))
                    continue
                rel = err(got)
                same = int((got.argmax(1) == ref.argmax(1)).sum())
                ok = bool(np.isfinite(got).all()) and (same == len(ref) if key[1] == "f32" else rel < bar)
                failed += not ok
                rows.append((shape, case, key[1], rel, bar if key[1] == "bf16" else float("nan"), same, len(ref),
                             "ok" if ok else "FAIL"))
            shutil.rmtree(path)
    print(f"\n{'shape':14} {'case':14} {'act':5} {'max rel err vs cpu':>19} {'bar':>9} {'same argmax':>12}  result")
    for shape, case, act, rel, bar, same, n, res in rows:
        shown = "-" if act == "f32" else f"{bar:.2e}"  # f32 is held to the CPU's argmax, not a bar
        print(f"{shape:14} {case:14} {act:5} {rel:19.2e} {shown:>9} {same:>8}/{n:<3}  {res}")
    print(f"{total - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
