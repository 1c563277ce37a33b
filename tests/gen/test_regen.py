"""generated/ is exactly what the generator makes from the installed headers, and the
generator also handles other CUDA releases (12.x from PyPI's NVIDIA wheels)."""
import os
import subprocess
import tempfile

import pytest

from conftest import ROOT
import thincuda_gen


def test_regenerating_reproduces_generated_byte_for_byte(rendered):
    files, problems = rendered
    assert problems == []
    gen_dir = os.path.join(ROOT, "generated")
    # CHANGES.md records the last regeneration that changed the API; no render makes it.
    on_disk = {f for f in os.listdir(gen_dir)} - {"CHANGES.md"}
    assert on_disk == set(files), "generated/ has stale or missing files"
    for rel, text in files.items():
        with open(os.path.join(gen_dir, rel)) as fh:
            assert fh.read() == text, "generated/%s differs: run tools/regen" % rel


def test_every_generated_file_says_do_not_edit(rendered):
    files, _ = rendered
    for rel, text in files.items():
        assert "Do not edit" in text.splitlines()[0], rel


def test_no_pointer_parameter_is_left_unclassified(built):
    libs, _, _, unused = built
    for lib in libs:
        assert lib.unclassified == [], lib.key
        for f in lib.functions:
            for p in f.params:
                if p.category == "pointer":
                    assert p.direction in ("in", "out", "inout"), (f.name, p.name)
                    assert p.space in ("host", "device"), (f.name, p.name)
    assert unused == [], "override rules that match nothing: %s" % unused


def test_every_function_is_wrapped_or_skipped_for_a_reason(built):
    libs, _, _, _ = built
    for lib in libs:
        wrapped = {f.decl_name for f in lib.functions}
        skipped = {s.name for s in lib.skipped}
        assert len(wrapped) + len(skipped) == lib.declared
        for s in lib.skipped:
            assert "no C user" in s.reason or "no library symbol" in s.reason


def test_driver_versions_come_from_cudaTypedefs(built):
    libs, _, _, _ = built
    cuda = libs[0]
    by = {f.name: f for f in cuda.functions}
    assert by["cuMemAlloc"].version == 3020 and by["cuMemAlloc"].symbol == "cuMemAlloc"
    assert by["cuCtxGetDevice"].version == 2000
    assert by["cuCtxGetDevice_v2"].version >= 13000
    assert by["cuMemcpyHtoD_ptds"].per_thread == "_ptds"
    assert by["cuStreamQuery_ptsz"].per_thread == "_ptsz"
    assert by["cuGraphInstantiate"].decl_name == "cuGraphInstantiateWithFlags"
    assert all(f.version_source.startswith("PFN_") for f in cuda.functions)


def test_the_cxx_only_half_functions_get_c_wrappers(built):
    cublas = built[0][1]
    cxx = {f.decl_name for f in cublas.functions if f.cxx_only}
    assert {"cublasHgemm", "cublasHgemm_64", "cublasHgemmStridedBatched"} <= cxx
    assert len(cxx) == 22
    hgemm = next(f for f in cublas.functions if f.name == "cublasHgemm")
    assert "const tc_half *alpha" in [p.decl for p in hgemm.params]


def _cuda12_includes():
    try:
        out = subprocess.run([os.path.join(ROOT, "tools", "cuda12-headers")],
                             capture_output=True, text=True, timeout=900)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, str(e)
    if out.returncode != 0:
        return None, out.stderr.strip()[-400:]
    return out.stdout.split(), ""


CUDA12, CUDA12_WHY = _cuda12_includes()


@pytest.mark.parametrize("index", [0, 1])
def test_generator_handles_cuda12_headers_and_output_compiles(index):
    if CUDA12 is None:
        pytest.skip("CUDA 12.x headers could not be fetched from PyPI: %s" % CUDA12_WHY)
    if os.environ.get("THINCUDA_CUDA12_BUILT") == "1":
        pytest.skip("tools/cuda12-build regenerated, built and tested these headers' bindings "
                    "earlier in this run (.ci/run)")
    inc = CUDA12[index]
    files, problems = thincuda_gen.render(inc)
    assert not [p for p in problems if "unclassified" in p]
    assert "CUDA 12." in files["COVERAGE.md"]
    with tempfile.TemporaryDirectory() as tmp:
        for rel, text in files.items():
            with open(os.path.join(tmp, rel), "w") as fh:
                fh.write(text)
        for rel in sorted(files):
            if rel.endswith(".c"):
                # nccl.h may come from elsewhere (NCCL is released apart from CUDA).
                r = subprocess.run(["cc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-c",
                                    "-I", tmp, "-isystem", inc, "-isystem",
                                    thincuda_gen.default_nccl_include(inc), os.path.join(tmp, rel),
                                    "-o", os.path.join(tmp, rel + ".o")],
                                   capture_output=True, text=True)
                assert r.returncode == 0, "%s from %s:\n%s" % (rel, inc, r.stderr[-2000:])
