#!/usr/bin/env python3
"""Record what PyPI's compressed-tensors (the library vLLM and llm-compressor use) makes of the
matrices tests/model/quant_hf.py quantises, as the reference that tests/model/test_gptq_awq.py
checks our compressed-tensors packing and loading against without PyTorch: for each ct-* case,
PackedQuantizationCompressor.compress of the weight s (q - z) with its scales and zero points
(the parts as a checkpoint holds them), its decompress with f32 scales (the weight), and
QuantizationConfig's dump of the scheme (the quantization_config llm-compressor writes).
compressed-tensors needs PyTorch (a 5 GB virtual environment with its CUDA wheels), so CI does
not install it; to re-record, from the repository root with a virtual environment outside it:
    python3 -m venv --system-site-packages ../ctvenv
    ../ctvenv/bin/pip install compressed-tensors==0.20.0
    ../ctvenv/bin/python tests/model/make_ct_reference.py tests/model/data
which writes ct_reference.safetensors and ct_reference.json there (recorded with
compressed-tensors 0.20.0 and torch 2.15.0, as the JSON says)."""
import json
import os
import sys

import numpy as np
import torch
from compressed_tensors import __version__ as ct_version
from compressed_tensors.compressors.pack_quantized.base import PackedQuantizationCompressor
from compressed_tensors.quantization import (QuantizationArgs, QuantizationConfig,
                                             QuantizationScheme)
from safetensors.numpy import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import quant_hf as Q  # noqa: E402

DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}


def scheme(case):
    _, bits, group, sym, _, _, _ = Q.CASES[case]
    args = QuantizationArgs(num_bits=bits, type="int", symmetric=sym,
                            strategy="channel" if group == -1 else "group",
                            group_size=None if group == -1 else group)
    return QuantizationScheme(targets=["Linear"], weights=args)


def record(case):
    _, bits, group, sym, _, fmt, _ = Q.CASES[case]
    q, z, s, _ = Q.reference_matrix(case)  # q [in, out], z and s [groups, out]
    k = q.shape[0]
    g = np.zeros(k, np.int64) if group == -1 else np.arange(k) // group
    half = 1 << (bits - 1)
    w = s.astype(np.float32)[g] * (q - z[g]).astype(np.float32)  # exact: s (q - z) in f32
    state = {"weight": torch.from_numpy(np.ascontiguousarray(w.T)),
             "weight_scale": torch.from_numpy(np.ascontiguousarray(s.T)).to(DTYPES[fmt])}
    if not sym:  # compressed-tensors' zero points are signed
        state["weight_zero_point"] = torch.from_numpy(np.ascontiguousarray(z.T - half)).to(
            torch.int8)
    packed = PackedQuantizationCompressor.compress(state, scheme(case))
    back = dict(packed)
    back["weight_scale"] = back["weight_scale"].to(torch.float32)
    weight = PackedQuantizationCompressor.decompress(back, scheme(case))["weight"]
    out = {f"{case}.{name}": packed[name].to(torch.float32 if name == "weight_scale"
                                             else packed[name].dtype).numpy()
           for name in ("weight_packed", "weight_scale", "weight_zero_point", "weight_shape")
           if name in packed}
    out[f"{case}.weight"] = weight.to(torch.float32).numpy()
    config = QuantizationConfig(config_groups={"group_0": scheme(case)}, format="pack-quantized",
                                quantization_status="compressed", ignore=["lm_head"]).to_dict()
    config["quant_method"] = "compressed-tensors"
    return out, json.loads(json.dumps(config, default=str))


def main(out_dir):
    tensors, configs = {}, {}
    for case in Q.CASES:  # not actorder group: this release's compressor carries no g_idx
        if Q.CASES[case][0] == "ct" and not Q.CASES[case][4]:
            t, configs[case] = record(case)
            tensors.update(t)
    save_file(tensors, os.path.join(out_dir, "ct_reference.safetensors"))
    with open(os.path.join(out_dir, "ct_reference.json"), "w") as f:
        json.dump({"compressed_tensors": ct_version, "torch": torch.__version__,
                   "quantization_config": configs}, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
