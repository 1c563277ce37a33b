"""Our GGUF dequantisation (src/model/quant.c, through tools/dequant) against gguf-py's
(gguf.quants.dequantize, llama.cpp's Python package) on random blocks of every type we read.
Scales are random finite f16 values; the other bytes are random."""
import os
import subprocess
import tempfile

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
BUILD = os.environ.get("BUILD", "build")
BIN = os.path.join(os.path.dirname(__file__), "..", "..", BUILD, "tools", "dequant")

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
}


@pytest.mark.parametrize("name", sorted(TYPES))
def test_dequantize_matches_gguf_py(name):
    if not os.path.exists(BIN):
        pytest.skip(f"{BIN} is not built")
    tid, be, bb, scales = TYPES[name]
    rng = np.random.default_rng(tid)
    blocks = 64
    raw = rng.integers(0, 256, size=(blocks, bb), dtype=np.uint8)
    for off in scales:
        raw[:, off:off + 2] = rng.uniform(-2, 2, size=blocks).astype(np.float16).view(np.uint8).reshape(blocks, 2)
    want = gguf.quants.dequantize(raw.reshape(-1), gguf.GGMLQuantizationType[name]).reshape(-1)
    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "in"), os.path.join(d, "out")
        raw.tofile(src)
        subprocess.run([BIN, str(tid), str(blocks * be), src, dst], check=True)
        got = np.fromfile(dst, dtype=np.float32)
    assert got.shape == want.shape
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6 * np.abs(want).max())
