#!/usr/bin/env python3
"""GPTQ, AWQ and compressed-tensors matrices packed on the GPU (what `thincuda` does when it
loads a folder on CUDA) against the host's packing of the same parts, byte for byte: every
linear of the first layer of a folder written by tests/model/quant_hf.py in each case it knows,
packed by tools/hfweight's `cuda` mode into a row block of a taller matrix (as fused matrices
take them), read back as GGUF blocks and compared. The host's packing is itself checked against
the reference unpacking in CI (tests/model/test_gptq_awq.py). Matrices the loader keeps as f32
(act-order over partial blocks, asymmetric 8-bit, f32 scales) are not packed and only counted.
Skips, saying so, where there is no GPU.
Usage: hf_pack_check.py HFWEIGHT_BINARY WORKDIR [--shape S]"""
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "model"))
import quant_hf as Q  # noqa: E402

NAMES = ["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"]


def main():
    a = sys.argv[1:]
    binary, work = a[0], a[1]
    shape = a[a.index("--shape") + 1] if "--shape" in a else "llama3.2-1b"
    if shutil.which("nvidia-smi") is None or subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode:
        print("hf_pack_check: no GPU here (nvidia-smi finds none); skipped")
        print("0 passed, 0 failed, 1 skipped")
        return
    os.makedirs(work, exist_ok=True)
    passed = failed = kept = 0
    for case in Q.CASES:
        d = os.path.join(work, case)
        r = subprocess.run([sys.executable, os.path.join(HERE, "..", "model", "quant_hf.py"), d, case,
                            "--shape", shape, "--layers", "1", "--vocab", "256"], capture_output=True, text=True)
        if r.returncode:
            print(f"{case}: cannot write the folder: {r.stderr.strip()}")
            failed += 1
            continue
        for n in NAMES:
            name = f"blk.0.{n}.weight"
            r = subprocess.run([binary, d, name, os.path.join(work, "w.f32"), "cuda"], capture_output=True, text=True)
            out = r.stdout.strip()
            if r.returncode:
                print(f"{case} {name}: FAIL {r.stderr.strip()}")
                failed += 1
            elif out.endswith("identical"):
                passed += 1
            elif out == "f32":
                kept += 1
            else:
                print(f"{case} {name}: FAIL held as {out} but not packed on the GPU")
                failed += 1
        shutil.rmtree(d, ignore_errors=True)
    print(f"hf_pack_check ({shape}): {passed} matrices packed on the GPU identical to the host's, "
          f"{kept} kept as f32")
    print(f"{passed} passed, {failed} failed, 0 skipped")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
