"""tools/bench_ops' quant arguments: a product shape of one's own (N K) is checked before any
GPU is asked for, each bad one refused with the usage and exit status 2; good ones run (or skip
with 77 where no GPU is)."""
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(ROOT, os.environ.get("BUILD", "build"), "tools", "bench_ops")

pytestmark = pytest.mark.skipif(not os.path.exists(BIN), reason=f"{BIN} is not built")


def run(*args):
    return subprocess.run([BIN, "quant", *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    "args",
    [
        ("q4_k", "64", "8192"),
        ("q4_k", "64", "8192", "100"),
        ("q4_k", "64", "0", "4096"),
        ("q4_k", "64", "8192", "4096x"),
        ("q4_k", "64", "-5", "4096"),
        ("q4_k", "64", "8192", "4096", "1"),
        ("q4_k", "64", "99999999", "4096"),
        ("q4_k", "64", "1048576", "2048"),
        ("q4_k", "7"),
    ],
)
def test_bad_shapes_and_rows_are_refused(args):
    r = run(*args)
    assert r.returncode == 2, (args, r.returncode, r.stdout, r.stderr)
    assert "bench_ops quant" in r.stderr


def test_a_shape_of_ones_own_runs_or_skips():
    r = run("q4_k", "64", "8192", "4096")
    assert r.returncode in (0, 77), (r.returncode, r.stdout, r.stderr)
    if r.returncode == 0:
        assert "w [8192 x 4096]" in r.stdout
        assert "w [4096 x 4096]" not in r.stdout
    else:
        assert "skipped" in r.stdout
