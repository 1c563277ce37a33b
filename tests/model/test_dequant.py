"""Our GGUF dequantisation (src/model/quant.c, through tools/dequant) against gguf-py's
(gguf.quants.dequantize, llama.cpp's Python package) on random blocks of every type we read,
the IQ family and the ternary types included, in several block counts. Scales are random
finite f16 values; the other bytes are random. Also: kernels/iq_grids.h is what
tools/build/iq_grids.py writes from the installed gguf-py."""
import importlib.util
import os
import subprocess
import tempfile

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
BUILD = os.environ.get("BUILD", "build")
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
BIN = os.path.join(ROOT, BUILD, "tools", "dequant")

# (ggml type, block elements, block bytes, byte offsets of f16 scales in a block)
TYPES = {
    "Q4_0": (2, 32, 18, [0]),
    "Q4_1": (3, 32, 20, [0, 2]),
    "Q5_0": (6, 32, 22, [0]),
    "Q5_1": (7, 32, 24, [0, 2]),
    "Q8_0": (8, 32, 34, [0]),
    "Q2_K": (10, 256, 84, [80, 82]),
    "Q3_K": (11, 256, 110, [108]),
    "Q4_K": (12, 256, 144, [0, 2]),
    "Q5_K": (13, 256, 176, [0, 2]),
    "Q6_K": (14, 256, 210, [208]),
    "IQ2_XXS": (16, 256, 66, [0]),
    "IQ2_XS": (17, 256, 74, [0]),
    "IQ3_XXS": (18, 256, 98, [0]),
    "IQ1_S": (19, 256, 50, [0]),
    "IQ4_NL": (20, 32, 18, [0]),
    "IQ3_S": (21, 256, 110, [0]),
    "IQ2_S": (22, 256, 82, [0]),
    "IQ4_XS": (23, 256, 136, [0]),
    "IQ1_M": (29, 256, 56, ["iq1_m"]),
    "TQ1_0": (34, 256, 54, [52]),
    "TQ2_0": (35, 256, 66, [64]),
}


def set_scales(raw, scales, rng):
    """Random finite f16 scales at the given byte offsets of each block (rows of raw); IQ1_M
    keeps its d in the top nibbles of the four u16 words at bytes 48-55."""
    blocks = raw.shape[0]
    for off in scales:
        d = rng.uniform(-2, 2, size=blocks).astype(np.float16).view(np.uint16)
        if off == "iq1_m":
            words = raw[:, 48:56].copy().view(np.uint16)
            for i in range(4):
                words[:, i] = (words[:, i] & 0x0FFF) | (((d >> (4 * i)) & 0xF) << 12)
            raw[:, 48:56] = words.view(np.uint8)
        else:
            raw[:, off:off + 2] = d.view(np.uint8).reshape(blocks, 2)


@pytest.mark.parametrize("blocks", [1, 3, 64])
@pytest.mark.parametrize("name", sorted(TYPES))
def test_dequantize_matches_gguf_py(name, blocks):
    if not os.path.exists(BIN):
        pytest.skip(f"{BIN} is not built")
    tid, be, bb, scales = TYPES[name]
    rng = np.random.default_rng(tid * 1000 + blocks)
    raw = rng.integers(0, 256, size=(blocks, bb), dtype=np.uint8)
    set_scales(raw, scales, rng)
    want = gguf.quants.dequantize(raw.reshape(-1), gguf.GGMLQuantizationType[name]).reshape(-1)
    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "in"), os.path.join(d, "out")
        raw.tofile(src)
        subprocess.run([BIN, str(tid), str(blocks * be), src, dst], check=True)
        got = np.fromfile(dst, dtype=np.float32)
    assert got.shape == want.shape
    assert np.isfinite(got).all() and np.isfinite(want).all()
    assert np.count_nonzero(want) > want.size // 2
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6 * np.abs(want).max())


def test_iq_grids_header_is_what_the_script_writes():
    spec = importlib.util.spec_from_file_location("iq_grids", os.path.join(ROOT, "tools", "build", "iq_grids.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with open(os.path.join(ROOT, "kernels", "iq_grids.h")) as fh:
        assert fh.read() == mod.render(), "kernels/iq_grids.h differs: run tools/build/iq_grids.py"
