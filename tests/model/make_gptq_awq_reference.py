#!/usr/bin/env python3
"""Record what the formats' own packers make of the matrices tests/model/quant_hf.py quantises,
as the reference that tests/model/test_gptq_awq.py checks our GPTQ and AWQ packing (which
writes the test folders) and our loading against without PyTorch:
- GPTQ v1 (checkpoint_format "gptq"): PyPI's auto-gptq 0.7.1, the packer optimum and
  transformers used for GPTQ checkpoints: QuantLinear.pack (nn_modules/qlinear/qlinear_cuda.py)
  of the weight s (q - z) with its scales, zeros and g_idx, and the weight its forward pass
  (the PyTorch path, taken on the CPU) unpacks from those parts: its product with the identity.
- GPTQ v2 ("gptq_v2": zero points stored as they are, not less one): PyPI's gptqmodel 7.7.0,
  AutoGPTQ's successor, whose TorchLinear.pack writes v2 (its v1 export lowers the zeros by
  one afterwards), and its dequantize_weight (f32 scales: the weight exactly).
- AWQ (GEMM): PyPI's autoawq 0.2.9 (AutoAWQ's last release): WQLinear_GEMM.from_linear of the
  same weight, scales and zeros, and utils.packing_utils.dequantize_gemm of its parts (f32
  scales: the weight exactly).
AutoGPTQ's and AutoAWQ's __init__ import their model classes and those classes' dependencies,
so their modules are imported without it.
All three need PyTorch (a 5 GB virtual environment with its CUDA wheels), which CI does not install;
to re-record, from the repository root with a virtual environment outside it:
    python3 -m venv --system-site-packages ../refvenv
    ../refvenv/bin/pip install torch transformers accelerate pillow protobuf datasets torchao \
        pypcre tokenicer logbar device-smi threadpoolctl defuser dill
    ../refvenv/bin/pip install --no-deps auto-gptq==0.7.1 autoawq==0.2.9
    BUILD_CUDA_EXT=0 ../refvenv/bin/pip install --no-deps --no-build-isolation gptqmodel==7.7.0
    ../refvenv/bin/python tests/model/make_gptq_awq_reference.py tests/model/data
which writes gptq_awq_reference.safetensors and gptq_awq_reference.json there (the JSON names
the versions)."""
import importlib.metadata
import importlib.util
import json
import os
import sys
import types

import numpy as np
import torch
from safetensors.numpy import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import quant_hf as Q  # noqa: E402


def without_init(*packages):
    """Make each package importable as a bare namespace, its __init__ not run."""
    for name in packages:
        spec = importlib.util.find_spec(name)
        mod = types.ModuleType(name)
        mod.__path__ = list(spec.submodule_search_locations)
        sys.modules[name] = mod


without_init("auto_gptq", "auto_gptq.nn_modules", "awq", "awq.modules", "awq.modules.linear")
from auto_gptq.nn_modules.qlinear.qlinear_cuda import QuantLinear  # noqa: E402
from awq.modules.linear.gemm import WQLinear_GEMM  # noqa: E402
from awq.utils.packing_utils import dequantize_gemm  # noqa: E402
from gptqmodel.nn_modules.qlinear.torch import TorchLinear  # noqa: E402


def linear_of(q, z, s, g_idx):
    """An nn.Linear holding s (q - z) in f32 (exact: f16 scales times small integers)."""
    w = s.astype(np.float32)[g_idx] * (q - z[g_idx]).astype(np.float32)  # [in, out]
    lin = torch.nn.Linear(q.shape[0], q.shape[1], bias=False)
    lin.weight.data = torch.from_numpy(np.ascontiguousarray(w.T))
    return lin


def record(case):
    method, bits, group, sym, desc_act, fmt, _ = Q.CASES[case]
    q, z, s, g_idx = Q.reference_matrix(case)  # q [in, out], z and s [groups, out], g_idx [in]
    k, n = q.shape
    lin = linear_of(q, z, s, g_idx)
    s16 = s.astype(np.float16)
    s32, z32 = (torch.from_numpy(v.astype(np.float32)) for v in (s, z))  # [groups, out]
    st, zt = s32.T.contiguous(), z32.T.contiguous()
    if method == "gptq" and fmt == "gptq_v2":
        tl = TorchLinear(bits, group, sym, bool(desc_act), k, n, bias=False)
        tl.pack(lin, st, zt, torch.from_numpy(g_idx.astype(np.int32)))
        parts = {"qweight": tl.qweight.numpy(), "qzeros": tl.qzeros.numpy(),
                 "scales": tl.scales.numpy(), "g_idx": tl.g_idx.numpy().astype(np.int32)}
        assert np.array_equal(parts["scales"], s16)
        tl.scales = tl.scales.to(torch.float32)
        weight = tl.dequantize_weight().T
    elif method == "gptq":
        assert (z >= 1).all(), "AutoGPTQ's v1 packing cannot hold a zero point of 0"
        ql = QuantLinear(bits, group, k, n, False, weight_dtype=torch.float32)
        ql.pack(lin, st, zt, torch.from_numpy(g_idx.astype(np.int32)))
        ql.eval()
        with torch.no_grad():
            weight = ql(torch.eye(k, dtype=torch.float32)).T
        parts = {"qweight": ql.qweight.numpy(), "qzeros": ql.qzeros.numpy(), "scales": s16,
                 "g_idx": ql.g_idx.numpy().astype(np.int32)}
        assert np.array_equal(ql.scales.numpy(), s.astype(np.float32))
    else:
        gl = WQLinear_GEMM.from_linear(lin, bits, group, scales=s32, zeros=z32)
        parts = {"qweight": gl.qweight.numpy(), "qzeros": gl.qzeros.numpy(),
                 "scales": gl.scales.numpy()}
        assert np.array_equal(parts["scales"], s16)
        weight = dequantize_gemm(gl.qweight, gl.qzeros, s32, bits, group).T
    out = {f"{case}.{name}": v for name, v in parts.items()}
    out[f"{case}.weight"] = np.ascontiguousarray(weight.to(torch.float32).numpy())
    return out


def main(out_dir):
    tensors, packers = {}, {}
    for case, (method, _, _, _, _, fmt, _) in Q.CASES.items():
        if method in ("gptq", "awq"):
            tensors.update(record(case))
            packers[case] = {"gptq": "auto-gptq", "gptq_v2": "gptqmodel", "gemm": "autoawq"}[fmt]
    save_file(tensors, os.path.join(out_dir, "gptq_awq_reference.safetensors"))
    versions = {p: importlib.metadata.version(p)
                for p in ("auto-gptq", "autoawq", "gptqmodel", "torch")}
    with open(os.path.join(out_dir, "gptq_awq_reference.json"), "w") as f:
        json.dump({"versions": versions, "packer": packers}, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
