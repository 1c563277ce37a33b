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


def _compile(tmp_path, files, cuda_include, extra=""):
    for rel, text in files.items():
        (tmp_path / rel).write_text(text + (extra if rel.endswith(".c") else ""))
    c = [f for f in files if f.endswith(".c")][0]
    return subprocess.run(["cc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-fsyntax-only",
                           "-I", str(tmp_path), "-I", os.path.join(ROOT, "src"),
                           "-I", os.path.join(ROOT, "generated"), "-isystem", cuda_include,
                           str(tmp_path / c)], capture_output=True, text=True)


def test_a_tensor_map_parameter_gets_a_checked_launcher_that_compiles(tmp_path, cuda_include):
    cu = tmp_path / "tma.cu"
    cu.write_text('#include <cuda.h>\n'
                  'extern "C" __global__ void load_tile(const __grid_constant__ CUtensorMap map, '
                  'float *out) {}\n')
    files = thincuda_gen.render_user_kernels([str(cu)], "ex_")
    h, c = files["ex_kernels.h"], files["ex_kernels.c"]
    assert ("static inline tc_status ex_launch_load_tile(tc_kmodule *m, tc_launch_config cfg, "
            "CUtensorMap map, float *out)") in h
    assert "TC__KARG(CUtensorMap, map)" in h
    assert '_Static_assert(sizeof(CUtensorMap) == 128' in c
    call = ("\nvoid use(tc_kmodule *m, tc_launch_config cfg, %s t, float *o)\n"
            "{ (void)ex_launch_load_tile(m, cfg, t, o); }\n")
    ok = _compile(tmp_path, files, cuda_include, call % "CUtensorMap")
    assert ok.returncode == 0, ok.stderr[-2000:]
    # Anything but a CUtensorMap (here a pointer to one) does not compile.
    bad = _compile(tmp_path, files, cuda_include, call % "const CUtensorMap *")
    assert bad.returncode != 0 and "_Generic" in bad.stderr, bad.stderr[-2000:]


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
