#!/usr/bin/env python3
"""Quantised GGUF models on CUDA against our CPU backend on the same file: random-weight
Llamas at real shapes (tests/gpu/quant_gguf.py) in the type mixes of llama-quantize's presets,
run over the same 64 + 32 ids. CUDA with f32 activations must make the CPU's greedy choice
(argmax) at every step; with bf16 activations the logits' relative error is reported and held
under 5e-2, or, for a model that amplifies rounding more (the f32 rows show how much each
random model does), under twice the error of the CPU backend's own bf16 run of the same file:
CUDA may add no more than bf16 arithmetic itself costs. Where llama-quantize could not split a row into K blocks (SmolLM2's 576-wide
rows) the file holds Q8_0 there, as llama-quantize does. The IQ and TQ mixes (types that
CUDA dequantises at load, kernels/iq.cu) run the same way. With --llama-quantize, the files are
instead llama.cpp's own: each shape is written in F16 and llama-quantize (built beside the
project, never committed) makes every mix from it (preset names such as Q4_K_M, Q5_0, IQ4_XS,
TQ2_0), so that the check covers the files exactly as llama.cpp writes them.
Usage: quant_model_check.py LOGITS_BINARY WORKDIR [--layers N] [--shapes a,b] [--mixes a,b]
                            [--llama-quantize PATH]"""
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import quant_gguf as Q  # noqa: E402

PROMPT, STEPS = 64, 32
MIXES = ["Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0", "Q4_0", "Q3_K_M", "Q2_K", "legacy", "IQ", "TQ"]


def main():
    a = sys.argv[1:]
    binary, work = a[0], a[1]
    opt = lambda k, d: a[a.index(k) + 1] if k in a else d
    layers = int(opt("--layers", "4"))
    shapes = opt("--shapes", "smollm2-135m,llama3.2-1b").split(",")
    mixes = opt("--mixes", ",".join(MIXES)).split(",")
    quantize = opt("--llama-quantize", None)
    os.makedirs(work, exist_ok=True)
    failed = total = skipped = 0
    rows = []
    for shape in shapes:
        vocab = 32000
        ids = np.random.default_rng(2).integers(0, vocab, PROMPT + STEPS).astype(np.int32)
        ids_path = os.path.join(work, "quant.ids")
        ids.tofile(ids_path)
        f16 = os.path.join(work, f"{shape}.F16.gguf")
        if quantize:
            Q.write(f16, shape, "F16", layers=layers, vocab=vocab, tokenizer=True)
        for mix in mixes:
            path = os.path.join(work, f"{shape}.{mix}.gguf")
            if not quantize:
                Q.write(path, shape, mix, layers=layers, vocab=vocab)
            else:
                r = subprocess.run([quantize, f16, path, mix], capture_output=True, text=True)
                if r.returncode:
                    # (a preset it refuses, such as the IQ1/IQ2 types without an importance matrix,
                    # is not ours to pass or fail)
                    print(f"{shape} {mix}: llama-quantize refused it, skipped\n{(r.stdout + r.stderr)[-600:]}", flush=True)
                    skipped += 1
                    continue
            out = {}
            for dev, act in (("cpu", "f32"), ("cpu", "bf16"), ("cuda", "f32"), ("cuda", "bf16")):
                o = os.path.join(work, f"{shape}.{mix}.{dev}.{act}.logits")
                r = subprocess.run([binary, path, dev, act, str(PROMPT), ids_path, o], capture_output=True, text=True)
                if r.returncode:
                    print(f"{shape} {mix} {dev} {act}: run failed\n{r.stdout}{r.stderr}", flush=True)
                    out[(dev, act)] = None
                    continue
                out[(dev, act)] = np.fromfile(o, dtype=np.float32).reshape(-1, vocab)
            ref, cpu16 = out[("cpu", "f32")], out[("cpu", "bf16")]
            err = lambda got: max(float(np.linalg.norm(got[s] - ref[s]) / np.linalg.norm(ref[s])) for s in range(len(ref)))
            bar = 5e-2 if ref is None or cpu16 is None else max(5e-2, 2 * err(cpu16))
            for key in (("cuda", "f32"), ("cuda", "bf16")):
                got = out[key]
                total += 1
                if ref is None or got is None:
                    failed += 1
                    rows.append((shape, mix, key[1], float("nan"), float("nan"), 0, 0, "FAIL"))
                    continue
                rel = err(got)
                same = int((got.argmax(1) == ref.argmax(1)).sum())
                ok = bool(np.isfinite(got).all()) and (same == len(ref) if key[1] == "f32" else rel < bar)
                failed += not ok
                rows.append((shape, mix, key[1], rel, bar if key[1] == "bf16" else float("nan"), same, len(ref), "ok" if ok else "FAIL"))
            os.remove(path)
        if quantize:
            os.remove(f16)
    print(f"\n{'shape':14} {'mix':8} {'act':5} {'max rel err vs cpu':>19} {'bar':>9} {'same argmax':>12}  result")
    for shape, mix, act, rel, bar, same, n, res in rows:
        print(f"{shape:14} {mix:8} {act:5} {rel:19.2e} {bar:9.2e} {same:>8}/{n:<3}  {res}")
    print(f"{total - failed} passed, {failed} failed" + (f", {skipped} presets skipped" if skipped else ""))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
