"""Launchers for a project's own kernels (thincuda_gen.py kernels) and the build's check that
kernels/meson.build compiles every kernels/*.cu."""
import os
import subprocess
import sys

import pytest

import thincuda_gen
from conftest import ROOT
from model import GenError

SAXPY = os.path.join(ROOT, "examples", "saxpy.cu")


def test_any_kernel_name_gets_a_launcher_in_a_module_of_its_own(tmp_path):
    image = tmp_path / "k.ptx"
    image.write_bytes(b".version 8.0")
    files = thincuda_gen.render_user_kernels([SAXPY], "ex_", str(image), "compute_80")
    h, c = files["ex_kernels.h"], files["ex_kernels.c"]
    assert "EX_KERNEL_SAXPY = 0" in h and "EX_KERNEL_COUNT = 1" in h
    assert ("static inline tc_status ex_launch_saxpy(tc_kmodule *m, tc_launch_config cfg, int n, "
            "float a, const float *x, float *y)") in h
    assert "TC__KARG(float, a)" in h
    assert "tc_launch_kernel" not in h and "tc_kernel_table" not in c
    assert '{"saxpy", "saxpy.cu", 5, 4, sizes_saxpy, names_saxpy}' in c
    # PTX is text: the image gets the NUL cuModuleLoadData needs.
    assert "image[13]" in c and '"ex", image, 13, "compute_80", 1, kernels' in c


def test_without_an_image_the_module_says_so(tmp_path):
    c = thincuda_gen.render_user_kernels([SAXPY], "ex_")["ex_kernels.c"]
    assert '"ex", NULL, 0, "", 1, kernels' in c


def test_bad_prefixes_and_reserved_parameter_names_are_refused(tmp_path):
    with pytest.raises(GenError, match="prefix"):
        thincuda_gen.render_user_kernels([SAXPY], "ex")
    cu = tmp_path / "k.cu"
    cu.write_text('extern "C" __global__ void k(int m) {}\n')
    with pytest.raises(GenError, match="reserved"):
        thincuda_gen.render_user_kernels([str(cu)], "ex_")


def test_the_command_line_writes_both_files(tmp_path):
    assert thincuda_gen.main(["kernels", "--prefix", "my_", "--out", str(tmp_path), SAXPY]) == 0
    assert sorted(os.listdir(tmp_path)) == ["my_kernels.c", "my_kernels.h"]


def test_a_kernel_file_left_out_of_meson_build_fails_the_build(tmp_path):
    check = os.path.join(ROOT, "tools", "build", "check_kernels.py")
    for f in ("a.cu", "b.cu"):
        (tmp_path / f).write_text("")
    stamp = str(tmp_path / "stamp")
    ok = subprocess.run([sys.executable, check, str(tmp_path), stamp, "a.cu", "b.cu"])
    assert ok.returncode == 0
    bad = subprocess.run([sys.executable, check, str(tmp_path), stamp, "a.cu"],
                         capture_output=True, text=True)
    assert bad.returncode == 1 and "b.cu not in kernel_sources" in bad.stderr
