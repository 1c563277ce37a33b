"""tools/ncu_source.py on a source-view CSV written as ncu writes one (two kernels, the columns
it needs among others, not-issued stall columns that must not count)."""
import csv
import importlib.util
import io
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("ncu_source", ROOT / "tools" / "ncu_source.py")
ncu_source = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ncu_source)

HEADER = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Warp Stall Sampling (Not-issued Samples)",
          "Instructions Executed", "stall_long_sb", "stall_math", "stall_wait", "stall_long_sb (Not Issued)",
          "stall_wait (Not Issued)"]
# (address, source, samples, executed, long_sb, math, wait); the not-issued columns get junk that
# must not be counted.
FIRST = [
    ("0x7f0000000000", "LDC R1, c[0x0][0x28]", 3, 64, 0, 0, 3),
    ("0x7f0000000010", "@!P0 LDS.128 R4, [R2]", 10, 512, 8, 0, 2),
    ("0x7f0000000020", "HMMA.16816.F32.BF16 R8, R4, R6, R8", 20, 512, 0, 15, 5),
    ("0x7f0000000030", "@P1 BRA 0x7f0000000010", 7, 512, 7, 0, 0),
    ("0x7f0000000040", "EXIT", 0, 64, 0, 0, 0),
]
SECOND = [
    ("0x7f0000100000", "IMAD R0, R1, R2, RZ", 1, 32, 0, 0, 1),
    ("0x7f0000100010", "FFMA R3, R4, R5, R3", 9, 32, 0, 9, 0),
]


def write(path, kernels):
    with open(path, "w", newline="") as f:
        w = csv.writer(f, quoting=csv.QUOTE_ALL)
        for name, rows in kernels:
            w.writerow(["Kernel Name", name, ""])
            w.writerow(HEADER)
            for a, src, s, n, lsb, math, wait in rows:
                w.writerow([a, "      " + src, s, s, n, lsb, math, wait, 99, 99])


def test_summary_counts_issued_samples_groups_and_opcodes(tmp_path):
    path = tmp_path / "src.csv"
    write(path, [("kernel_a", FIRST), ("kernel_b", SECOND)])
    kernels = ncu_source.read(path)
    assert [k.name for k in kernels] == ["kernel_a", "kernel_b"]
    assert [len(k.rows) for k in kernels] == [5, 2]
    s = ncu_source.summary(kernels[0])
    assert s["issued"] == 64 + 3 * 512 + 64
    assert s["samples"] == 40
    # The all-samples reasons only (the not-issued columns' 99s are not stalls of their own).
    assert dict(s["reasons"]) == {"long_sb": 15, "math": 15, "wait": 10}
    # The loop body (three instructions run 512 times) first: the most samples.
    body = s["groups"][0]
    assert (body["runs"], body["instructions"], body["issued"], body["samples"]) == (512, 3, 1536, 37)
    assert body["reasons"].most_common(1) == [("long_sb", 15)]
    once = s["groups"][1]
    assert (once["runs"], once["instructions"], once["samples"]) == (64, 2, 3)
    # Opcodes without predicates or modifiers.
    assert s["mix"]["LDS"] == 512 and s["mix"]["HMMA"] == 512 and s["mix"]["BRA"] == 512
    assert ncu_source.opcode("@!P0 LDS.128 R4, [R2]") == "LDS"
    assert ncu_source.opcode("") == "?"


def test_report_prints_weights_per_instruction_per_kernel(tmp_path, capsys):
    path = tmp_path / "src.csv"
    write(path, [("kernel_a", FIRST), ("kernel_b", SECOND)])
    ncu_source.main([str(path), "--weights", "16640,640", "--top", "2"])
    out = capsys.readouterr().out
    heads = [line for line in out.splitlines() if line.startswith("==")]
    assert heads == ["== 0: kernel_a: 1,664 warp instructions, 40 stall samples, 10.0 weights an instruction",
                     "== 1: kernel_b: 64 warp instructions, 10 stall samples, 10.0 weights an instruction"]
    assert "HMMA.16816.F32.BF16" in out and "math 15" in out
    buf = io.StringIO()
    ncu_source.report(ncu_source.read(path)[1], 1, out=buf)
    assert "weights an instruction" not in buf.getvalue()


def test_bad_input_is_one_clear_error(tmp_path):
    bare = tmp_path / "bare.csv"
    bare.write_text('"Kernel Name","k",\n"Address","Source"\n"0x0","NOP"\n')
    with pytest.raises(SystemExit, match="no column Instructions Executed"):
        ncu_source.read(bare)
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(SystemExit, match="no kernel in it"):
        ncu_source.main([str(empty)])
    good = tmp_path / "good.csv"
    write(good, [("kernel_a", FIRST)])
    with pytest.raises(SystemExit, match="--weights"):
        ncu_source.main([str(good), "--weights", "many"])
