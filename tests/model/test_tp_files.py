"""Tensor parallelism from files (tools/logits RANKS): a random-weight GGUF (tests/gpu/
quant_gguf.py's tiny shape: 4 heads over 2 KV heads, so that 4 ranks replicate each KV head)
split over 2 and 4 CPU ranks, each rank cutting its shard out of the file's tensors as it loads
them (float rows and columns, and the quantised blocks the CPU reads as stored), gives the
logits of the unsplit model: prompt and decode steps, f32, relative error below 1e-5. K-quants
(tiny-k: Llama-2-7B's feed-forward width of 43 blocks of 256, heads of 128) split the width in
whole blocks, 22 + 21 at N = 2 and 11 + 11 + 11 + 10 at N = 4, with the same logits. A split
whose heads would cut through K-quant blocks is one clear error."""
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "gpu"))
import quant_gguf as Q  # noqa: E402

BUILD = os.environ.get("BUILD", "build")
BIN = os.path.join(HERE, "..", "..", BUILD, "tools", "logits")
VOCAB = 512


def logits(path, ids, tmp, ranks):
    out = os.path.join(tmp, f"out{ranks}.logits")
    r = subprocess.run([BIN, path, "cpu", "f32", "6", ids, out, str(ranks)], capture_output=True,
                       text=True)
    return r, (np.fromfile(out, dtype=np.float32).reshape(-1, VOCAB) if r.returncode == 0 else None)


@pytest.fixture(scope="module")
def ids(tmp_path_factory):
    if not os.path.exists(BIN):
        pytest.skip(f"{BIN} is not built")
    p = str(tmp_path_factory.mktemp("ids") / "ids")
    np.random.default_rng(2).integers(0, VOCAB, 10).astype(np.int32).tofile(p)
    return p


@pytest.mark.parametrize("mix", ["F16", "BF16", "Q8_0", "Q4_0", "legacy"])
def test_split_file_gives_the_unsplit_logits(mix, ids, tmp_path):
    path = str(tmp_path / "m.gguf")
    Q.write(path, "tiny", mix)
    r1, want = logits(path, ids, str(tmp_path), 1)
    assert r1.returncode == 0, r1.stderr
    for ranks in (2, 4):
        r, got = logits(path, ids, str(tmp_path), ranks)
        assert r.returncode == 0, r.stderr
        assert got.shape == want.shape
        rel = np.abs(got - want).max() / np.abs(want).max()
        print(f"{mix} over {ranks} ranks: relative error {rel:.2e}")
        assert rel < 1e-5, (ranks, rel)
        assert (got.argmax(1) == want.argmax(1)).all()


@pytest.mark.parametrize("case", ["gptq-asym4", "awq", "ct-w8a16", "awq-g128", "gptq-sym4-col"])
def test_split_quantised_folder_gives_the_unsplit_logits(case, ids, tmp_path):
    """A GPTQ, AWQ or compressed-tensors folder (tests/model/quant_hf.py's tiny shapes), whose
    matrices the loader packs per tensor on the host when a split cuts them. AWQ's groups of 64
    are q4_1_g64 blocks of 64 columns: heads of 64 (heads of 32 over 4 ranks are refused, as
    half a block). Groups of 128 and per column, q4_1_g128 on one rank, are held in blocks of
    64 when split (tc_hf_open_packed_ex), so heads of 64 split one by one too."""
    sys.path.insert(0, HERE)
    import quant_hf as H

    path = str(tmp_path / case)
    if case == "awq":
        H.write(path, case, "tiny", vocab=VOCAB)
        r, _ = logits(path, ids, str(tmp_path), 4)
        assert r.returncode != 0
        assert "32 columns of attn_output, not whole q4_1_g64 blocks of 64" in r.stderr, r.stderr
        shutil.rmtree(path)
    H.write(path, case, "tiny-h64" if case in ("awq", "awq-g128", "gptq-sym4-col") else "tiny", vocab=VOCAB)
    r1, want = logits(path, ids, str(tmp_path), 1)
    assert r1.returncode == 0, r1.stderr
    for ranks in (2, 4):
        r, got = logits(path, ids, str(tmp_path), ranks)
        assert r.returncode == 0, r.stderr
        rel = np.abs(got - want).max() / np.abs(want).max()
        print(f"{case} over {ranks} ranks: relative error {rel:.2e}")
        assert rel < 1e-5, (ranks, rel)
        assert (got.argmax(1) == want.argmax(1)).all()


@pytest.mark.parametrize("mix", ["Q4_K_M", "Q3_K_M"])
def test_k_quant_feed_forward_splits_in_whole_blocks(mix, ids, tmp_path):
    path = str(tmp_path / "k.gguf")
    Q.write(path, "tiny-k", mix)
    r1, want = logits(path, ids, str(tmp_path), 1)
    assert r1.returncode == 0, r1.stderr
    for ranks in (2, 4):
        r, got = logits(path, ids, str(tmp_path), ranks)
        assert r.returncode == 0, r.stderr
        assert got.shape == want.shape
        rel = np.abs(got - want).max() / np.abs(want).max()
        print(f"{mix} tiny-k over {ranks} ranks: relative error {rel:.2e}")
        assert rel < 1e-5, (ranks, rel)
        assert (got.argmax(1) == want.argmax(1)).all()
    # 8 heads: 8 ranks would hold 128 of wo's columns each, half a block; 3 do not divide them
    r, _ = logits(path, ids, str(tmp_path), 8)
    assert r.returncode == 1
    assert "a rank's 1 attention head is 128 columns of attn_output, not whole q4_k blocks" in \
        r.stderr, r.stderr
    r, _ = logits(path, ids, str(tmp_path), 3)
    assert r.returncode == 1
    assert "the 8 attention heads do not split evenly" in r.stderr, r.stderr


def test_heads_inside_k_quant_blocks_are_refused(ids, tmp_path):
    path = str(tmp_path / "k.gguf")
    Q.write(path, "tiny", "Q4_K_M")
    r, _ = logits(path, ids, str(tmp_path), 2)
    assert r.returncode == 1
    assert "tensor parallelism over 2 ranks: a rank's 2 attention heads are 128 columns of " \
        "attn_output, not whole q4_k blocks of 256" in r.stderr, r.stderr
    r, _ = logits(path, ids, str(tmp_path), 3)
    assert r.returncode == 1
    assert "tensor parallelism over 3 ranks" in r.stderr, r.stderr
