"""Quantised GGUF files on the CPU backend (tools/logits): random-weight models in each
llama-quantize type mix (tests/gpu/quant_gguf.py) load and run with finite logits, and give
the logits of the same weights dequantised by gguf-py (llama.cpp's Python package) into an F32
file; malformed files (a truncated one, rows that are not whole blocks) are one clear error."""
import os
import subprocess
import sys

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "gpu"))
import gguf_writer as W  # noqa: E402
import quant_gguf as Q  # noqa: E402

BUILD = os.environ.get("BUILD", "build")
BIN = os.path.join(HERE, "..", "..", BUILD, "tools", "logits")
MIXES = ["Q4_K_M", "Q5_K_M", "Q3_K_M", "Q2_K", "Q6_K", "Q8_0", "Q4_0", "legacy"]


def logits(path, ids, tmp, prompt=6):
    out = os.path.join(tmp, "out.logits")
    r = subprocess.run([BIN, path, "cpu", "f32", str(prompt), ids, out], capture_output=True, text=True)
    return r, (np.fromfile(out, dtype=np.float32).reshape(-1, 512) if r.returncode == 0 else None)


def dequantised_copy(src, dst):
    """The same model with every quantised tensor dequantised by gguf-py, as F32."""
    reader = gguf.GGUFReader(src)
    meta = {}
    for f in reader.fields.values():
        if f.name.startswith("GGUF."):
            continue
        v = f.parts[f.data[0]]
        meta[f.name] = bytes(v).decode() if f.types[0] == gguf.GGUFValueType.STRING else v.item()
    tensors = []
    for t in reader.tensors:
        shape = [int(x) for x in reversed(t.shape)]
        w = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32).reshape(shape)
        tensors.append((t.name, W.GGML_F32, w.tobytes(), shape))
    W.write(dst, meta, tensors)


@pytest.fixture(scope="module")
def ids(tmp_path_factory):
    if not os.path.exists(BIN):
        pytest.skip(f"{BIN} is not built")
    p = str(tmp_path_factory.mktemp("ids") / "ids")
    np.random.default_rng(1).integers(0, 512, 10).astype(np.int32).tofile(p)
    return p


@pytest.mark.parametrize("mix", MIXES)
def test_mix_runs_as_its_gguf_py_dequantisation(mix, ids, tmp_path):
    q, f = str(tmp_path / "q.gguf"), str(tmp_path / "f.gguf")
    Q.write(q, "tiny", mix)
    dequantised_copy(q, f)
    rq, lq = logits(q, ids, str(tmp_path))
    rf, lf = logits(f, ids, str(tmp_path))
    assert rq.returncode == 0, rq.stderr
    assert rf.returncode == 0, rf.stderr
    assert np.isfinite(lq).all()
    rel = np.linalg.norm(lq - lf) / np.linalg.norm(lf)
    assert rel < 1e-4, rel
    assert (lq.argmax(1) == lf.argmax(1)).all()


def test_truncated_file_is_one_error(ids, tmp_path):
    q = str(tmp_path / "q.gguf")
    Q.write(q, "tiny", "Q4_K_M")
    data = open(q, "rb").read()
    open(q, "wb").write(data[: len(data) // 2])
    r, _ = logits(q, ids, str(tmp_path))
    assert r.returncode != 0
    assert "runs past the end of the file" in r.stderr


def test_rows_not_whole_blocks_are_one_error(ids, tmp_path):
    q = str(tmp_path / "q.gguf")
    Q.write(q, "tiny", "Q4_K_M")
    data = bytearray(open(q, "rb").read())
    # token_embd.weight [512, 256] Q4_K declared as [1024, 128]: as many blocks, rows of half a block.
    name = b"token_embd.weight"
    at = data.index(name) + len(name) + 4
    data[at:at + 16] = np.array([128, 1024], dtype=np.uint64).tobytes()
    open(q, "wb").write(bytes(data))
    r, _ = logits(q, ids, str(tmp_path))
    assert r.returncode != 0
    assert "not whole blocks" in r.stderr, r.stderr
