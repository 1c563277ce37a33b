"""Quantised GGUF files on the CPU backend (tools/logits): random-weight models in each
llama-quantize type mix (tests/gpu/quant_gguf.py), and in mixes of the IQ and ternary types
(dequantised at load), load and run with finite logits, and give the logits of the same
weights dequantised by gguf-py (llama.cpp's Python package) into an F32 file; malformed files
(a truncated one, rows that are not whole blocks) are one clear error."""
import os
import struct
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
MIXES = ["Q4_K_M", "Q5_K_M", "Q3_K_M", "Q2_K", "Q6_K", "Q8_0", "Q4_0", "legacy", "IQ", "TQ"]


def logits(path, ids, tmp, prompt=6, env=None):
    out = os.path.join(tmp, "out.logits")
    r = subprocess.run([BIN, path, "cpu", "f32", str(prompt), ids, out], capture_output=True, text=True,
                       env=dict(os.environ, **(env or {})))
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
    rq, lq = logits(q, ids, str(tmp_path), env={"THINCUDA_LOG": "info"})
    rf, lf = logits(f, ids, str(tmp_path))
    assert rq.returncode == 0, rq.stderr
    assert rf.returncode == 0, rf.stderr
    # One line names the tensors dequantised at load (the IQ and TQ types; none otherwise).
    lines = [x for x in rq.stderr.splitlines() if "dequantised to f32 on the host" in x]
    assert len(lines) == (1 if mix in ("IQ", "TQ") else 0), rq.stderr
    assert np.isfinite(lq).all()
    rel = np.linalg.norm(lq - lf) / np.linalg.norm(lf)
    assert rel < 1e-4, rel
    assert (lq.argmax(1) == lf.argmax(1)).all()


def test_info_counts_the_iq_types(tmp_path):
    exe = os.path.join(HERE, "..", "..", BUILD, "src", "cli", "thincuda")
    if not os.path.exists(exe):
        pytest.skip(f"{exe} is not built")
    q = str(tmp_path / "q.gguf")
    Q.write(q, "tiny", "IQ", tokenizer=True)
    r = subprocess.run([exe, "info", "--model", q, "--device", "cpu"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    counts = {}
    for t in gguf.GGUFReader(q).tensors:
        counts[t.tensor_type.name.lower()] = counts.get(t.tensor_type.name.lower(), 0) + 1
    assert len(counts) == 10  # the nine IQ types and the norms' f32
    line = next(x for x in r.stdout.splitlines() if x.startswith("tensor types"))
    for name, n in counts.items():
        assert f" {name} x{n} (" in line, line


@pytest.mark.parametrize("mix", ["Q4_K_M", "IQ"])
def test_truncated_file_is_one_error(mix, ids, tmp_path):
    q = str(tmp_path / "q.gguf")
    Q.write(q, "tiny", mix)
    data = open(q, "rb").read()
    open(q, "wb").write(data[: len(data) // 2])
    r, _ = logits(q, ids, str(tmp_path))
    assert r.returncode != 0
    assert "runs past the end of the file" in r.stderr


# (mix, a [256, 256] or [512, 256] tensor of 256-element blocks: Q4_K, IQ2_XXS)
@pytest.mark.parametrize("mix,name", [("Q4_K_M", b"token_embd.weight"), ("IQ", b"blk.0.attn_q.weight")])
def test_rows_not_whole_blocks_are_one_error(mix, name, ids, tmp_path):
    q = str(tmp_path / "q.gguf")
    Q.write(q, "tiny", mix)
    data = bytearray(open(q, "rb").read())
    # The tensor's rows declared half a block long (twice as many): as many blocks.
    at = data.index(struct.pack("<Q", len(name)) + name) + 8 + len(name)
    n_dims, cols, rows = struct.unpack_from("<IQQ", data, at)
    assert n_dims == 2 and cols == 256
    struct.pack_into("<QQ", data, at + 4, 128, rows * 2)
    open(q, "wb").write(bytes(data))
    r, _ = logits(q, ids, str(tmp_path))
    assert r.returncode != 0
    assert "not whole blocks" in r.stderr, r.stderr
