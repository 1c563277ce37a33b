"""What libclang sees (C and C++ modes), what the generator wraps and what the shipped
libraries export agree, except for differences listed with a reason in
known_differences.toml."""
import os
import re
import shutil
import subprocess
import tomllib

import pytest

from conftest import ROOT
import model

HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(HERE, "known_differences.toml"), "rb") as fh:
    KNOWN = tomllib.load(fh)


def exports(path, kinds=(" T ",)):
    """The functions a library exports: strong (T), and weak (W) where kinds says so."""
    if not shutil.which("nm"):
        pytest.skip("nm is not installed")
    out = subprocess.run(["nm", "-D", "--defined-only", path], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return {l.split()[-1].split("@")[0] for l in out.stdout.splitlines()
            if any(k in l for k in kinds)}


def library_path(cuda_include, key):
    root = os.path.dirname(cuda_include)
    names = {"cuda": ["lib64/stubs/libcuda.so", "lib/stubs/libcuda.so"],
             "cublas": ["lib64/libcublas.so", "lib/libcublas.so"],
             "curand": ["lib64/libcurand.so", "lib/libcurand.so"],
             "nccl": ["lib64/libnccl.so.2", "lib/libnccl.so.2"]}[key]
    for n in names:
        if os.path.exists(os.path.join(root, n)):
            return os.path.join(root, n)
    pytest.skip("no %s library beside %s" % (key, cuda_include))


def explained(lib, symbol, wrapped_bases, kind):
    for rule in KNOWN[kind]:
        if rule["library"] != lib.key:
            continue
        pat = rule["symbols"]
        if pat == "older ABI":
            base = re.sub(r"(_v\d+)?(_ptds|_ptsz)?$", "", symbol)
            if base in wrapped_bases:
                return True
        elif pat == "legacy v1":
            # Legacy names are the v2 names without the handle-taking _v2 suffix.
            if symbol + "_v2" in wrapped_bases or symbol in LEGACY_V1:
                return True
        elif model.glob_match(symbol, pat):
            return True
    return False


LEGACY_V1 = {"cublasAlloc", "cublasFree", "cublasInit", "cublasShutdown", "cublasGetError",
             "cublasSetKernelStream"}


@pytest.mark.parametrize("index", [0, 1, 2])
def test_exports_and_wrappers_agree(built, cuda_include, index):
    lib = built[0][index]
    ex = exports(library_path(cuda_include, lib.key))
    if lib.key == "cuda":
        wrapped = {f.decl_name + f.per_thread for f in lib.functions}
        bases = ({f.symbol for f in lib.functions} | {f.decl_name for f in lib.functions}
                 | {f.name for f in lib.functions})
    else:
        wrapped = {f.decl_name for f in lib.functions}
        bases = wrapped | {re.sub(r"_v2$", "", n) for n in wrapped}
    missing = sorted(s for s in wrapped - ex
                     if not explained(lib, s, bases, "declared_not_exported"))
    assert missing == [], "wrapped but not exported: %s" % missing[:20]
    v2 = {f.decl_name for f in lib.functions if f.decl_name.endswith("_v2")}
    extra = []
    for s in sorted(ex - wrapped):
        if not s.startswith(("cu", "curand")):
            continue
        if lib.key == "cublas" and s + "_v2" in v2:
            continue  # the legacy API's name for a v2 function
        if not explained(lib, s, bases, "exported_not_wrapped"):
            extra.append(s)
    assert extra == [], "exported but neither wrapped nor explained: %s" % extra[:40]


def test_cxx_mode_adds_only_the_half_precision_functions(cuda_include):
    path = os.path.join(cuda_include, "cublas_v2.h")
    c = model.function_decls(model.parse(path, cuda_include, "c"), {"cublas_api.h"})
    cxx = model.function_decls(model.parse(path, cuda_include, "c++"), {"cublas_api.h"})
    assert set(c) <= set(cxx)
    extra = set(cxx) - set(c)
    for name in extra:
        cur = cxx[name]
        spelled = " ".join(a.type.spelling for a in cur.get_arguments())
        static = cur.storage_class == model.ci.StorageClass.STATIC
        assert static or "__half" in spelled or "__nv_bfloat16" in spelled, name


def test_generated_table_lists_every_wrapper(built):
    """Every wrapper of a loaded library is in the symbol table; NVTX's, which call the
    header's own definitions, are not (nothing to resolve)."""
    with open(os.path.join(ROOT, "generated", "tc_symbols.c")) as fh:
        table = set(re.findall(r'^    \{ [\d, ]+\}, /\* (\w+) \*/$', fh.read(), re.M))
    names = {f.name for lib in built[0] if not lib.direct for f in lib.functions}
    assert table == names
    nvtx = next(lib for lib in built[0] if lib.key == "nvtx")
    assert "nvtxRangePushA" in {f.name for f in nvtx.functions}
    assert not table & {f.name for f in nvtx.functions}


def test_new_libraries_are_wrapped_whole(built):
    """cuBLASLt, NVML and NVTX: every declaration wrapped except cuBLASLt's static inline
    *Init helpers; NVML's public names resolve its versioned symbols."""
    by = {lib.key: lib for lib in built[0]}
    lt, nvml, nvtx = by["cublaslt"], by["nvml"], by["nvtx"]
    assert all(s.name.endswith("Init") for s in lt.skipped), lt.skipped
    assert nvml.skipped == [] and nvtx.skipped == []
    f = {f.name: f for f in nvml.functions}
    assert f["nvmlInit"].symbol == "nvmlInit_v2"
    assert f["nvmlDeviceGetCount"].symbol == "nvmlDeviceGetCount_v2"
    temp = [p for p in f["nvmlDeviceGetTemperature"].params if p.category == "pointer"]
    assert [(p.direction, p.space) for p in temp] == [("out", "host")]
    procs = {p.name: p.direction for p in f["nvmlDeviceGetComputeRunningProcesses"].params}
    assert procs["infoCount"] == "inout" and procs["infos"] == "out"
    mem2 = next(p for p in f["nvmlDeviceGetMemoryInfo_v2"].params if p.category == "pointer")
    assert (mem2.direction, mem2.source) == ("inout", "version field")


def test_nccl_exports_and_wrappers_agree(built, cuda_include):
    """libnccl exports each function twice: ncclX as a weak alias of the profiling
    interface's pncclX. Every wrapper names an export; every ncclX export is wrapped or
    explained."""
    nccl = next(lib for lib in built[0] if lib.key == "nccl")
    ex = exports(library_path(cuda_include, "nccl"), kinds=(" T ", " W "))
    wrapped = {f.decl_name for f in nccl.functions}
    assert sorted(wrapped - ex) == [], "wrapped but not exported"
    assert {s.name for s in nccl.skipped} <= ex
    extra = [s for s in sorted(ex - wrapped)
             if not explained(nccl, s, wrapped, "exported_not_wrapped")]
    assert extra == [], "exported but neither wrapped nor explained: %s" % extra[:40]
    by = {f.name: f for f in nccl.functions}
    assert {"ncclAllReduce", "ncclCommInitRank", "ncclGroupStart", "ncclGroupEnd"} <= set(by)
    assert by["ncclGroupStart"].params == []
    assert nccl.sonames == ["libnccl.so.2", "libnccl.so"]
    ar = {p.name: (p.direction, p.space) for p in by["ncclAllReduce"].params
          if p.category == "pointer"}
    assert ar == {"sendbuff": ("in", "device"), "recvbuff": ("out", "device")}
    init = {p.name: (p.direction, p.space) for p in by["ncclCommInitRank"].params
            if p.category == "pointer"}
    assert init == {"comm": ("out", "host")}
