"""tools/regen for a new release: override rules and hints that match nothing in it are
warnings, not a refusal, and the API difference against the generated/ being replaced goes to
the console and CHANGES.md (fixture releases tests/gen/fixture/release_a and release_b)."""
import os

import thincuda_gen

FIX = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixture")


def regen(release, out, kernels):
    return thincuda_gen.main(["--cuda-include", os.path.join(FIX, release), "--out", out,
                              "--kernels", kernels])


def test_a_new_release_regenerates_in_one_command_with_a_summary(tmp_path, capsys):
    out, kernels = str(tmp_path / "generated"), str(tmp_path / "kernels")
    os.makedirs(kernels)
    assert regen("release_a", out, kernels) == 0
    err = capsys.readouterr().err
    assert "warning: override rule matches nothing in these headers" in err
    assert "warning: gen/hints.toml names a status these headers lack" in err

    assert regen("release_b", out, kernels) == 0
    console = capsys.readouterr().out
    assert "(CUDA 12.4 -> 12.6)" in console
    assert "cuda.h: 1 added, 1 removed, 1 changed signature, 0 newly deprecated" in console
    assert "cublas_api.h: 1 added, 0 removed, 0 changed signature" in console
    assert "curand.h: 0 added, 0 removed, 0 changed signature" in console
    # nvJitLink's symbol is renamed each release (__nvJitLinkComplete_12_6); its name is not.
    assert "nvJitLink.h: 0 added, 0 removed, 0 changed signature" in console
    for header in ("cublasLt.h", "nvml.h", "nccl.h", "nvToolsExt.h"):
        assert "%s: 0 added, 0 removed, 0 changed signature" % header in console
    assert "status codes: 1 added, 0 removed" in console
    changes = open(os.path.join(out, "CHANGES.md")).read()
    assert "# API changes: CUDA 12.4 -> CUDA 12.6" in changes
    assert "- `cuNewThing(CUstream hStream, unsigned int flags)`" in changes
    assert "- `cuOldThing(int value)`" in changes
    assert ("- `cuInit(unsigned int Flags)`\n  `cuInit(unsigned long long Flags)`" in changes)
    assert "cuStreamSynchronize" not in changes  # a renamed parameter is no change
    assert "- `cublasSetSmCountTarget(cublasHandle_t handle, int smCountTarget)`" in changes
    assert "Added: `CUDA_ERROR_NOT_READY`" in changes
    jitlink = open(os.path.join(out, "tc_nvjitlink.c")).read()
    assert '"__nvJitLinkComplete_12_6\\0"' in open(os.path.join(out, "tc_symbols.c")).read()
    assert "tc_nvJitLinkComplete(nvJitLinkHandle handle)" in jitlink
    # nccl.h: the pnccl profiling names skipped, an unprototyped () declaration wrapped as
    # (void), the count of codes no status.
    nccl = open(os.path.join(out, "tc_nccl.h")).read()
    assert "TC_API tc_status tc_ncclGroupStart(void);" in nccl
    assert "pncclGroupStart" not in nccl
    status = open(os.path.join(out, "tc_status.h")).read()
    assert "TC_ncclInvalidArgument = 0x08000004" in status
    assert "ncclNumResults" not in status

    assert regen("release_b", out, kernels) == 0
    assert "no API difference" in capsys.readouterr().out
    assert open(os.path.join(out, "CHANGES.md")).read() == changes


def test_parameter_types_ignore_names_but_not_types():
    t = thincuda_gen._param_type
    assert t("const float *alpha") == t("const float *a") == "const float *"
    assert t("unsigned int flags") == "unsigned int"
    assert t("int dims[3]") == "int [3]"
    assert t("void (*fn)(void *user)") == t("void (*cb)(void *user)")
    assert t("size_t n") != t("int n")
    assert t("unsigned") == "unsigned"
