"""Models the wrapped libraries (driver, cuBLAS, cuBLASLt, cuRAND, NVRTC, nvJitLink, NVML, NVTX,
NCCL) from their headers."""

import os
import re

import clang.cindex as ci

from model import (Function, GenError, Library, Skip, VERSION_SUFFIX, build_function, enums,
                   function_decls, macro_aliases, macro_int, parse, public_names, _walk,
                   _in_files)

PFN_NAME = re.compile(r"^PFN_(\w+?)_v(\d+)(_ptds|_ptsz)?$")


def _fn_sig(cursor_type):
    return cursor_type.get_canonical().spelling


def _pfn_versions(include_dir):
    """Map (base name, per-thread suffix) -> [(version, canonical signature)] from cudaTypedefs.h."""
    path = os.path.join(include_dir, "cudaTypedefs.h")
    if not os.path.isfile(path):
        return {}
    tu = parse(path, include_dir)
    out = {}
    for c in _walk(tu.cursor):
        if c.kind != ci.CursorKind.TYPEDEF_DECL or not _in_files(c, {"cudaTypedefs.h"}):
            continue
        m = PFN_NAME.match(c.spelling)
        if not m:
            continue
        ptr = c.underlying_typedef_type.get_canonical()
        if ptr.kind != ci.TypeKind.POINTER:
            continue
        sig = ptr.get_pointee().get_canonical().spelling
        out.setdefault((m.group(1), m.group(3) or ""), []).append((int(m.group(2)), sig))
    for v in out.values():
        v.sort()
    return out


def _suffix_num(name):
    m = VERSION_SUFFIX.search(name)
    return int(m.group(0)[2:]) if m else 1


def _assign_driver_versions(lib, decls, pfn, cuda_version):
    """Give each driver function the ABI version cuGetProcAddress needs (cudaTypedefs.h)."""
    bases = {}
    for d, cur in decls.items():
        bases.setdefault(VERSION_SUFFIX.sub("", d), []).append(d)
    chosen = {}
    for base, siblings in bases.items():
        for pt in ("", "_ptds", "_ptsz"):
            cands = pfn.get((base, pt), [])
            by_sig = {}
            for d in siblings:
                by_sig.setdefault(_fn_sig(decls[d].type), []).append(d)
            for sig, ds in by_sig.items():
                ds.sort(key=_suffix_num)
                vs = [v for v, s in cands if s == sig]
                for d, v in zip(reversed(ds), reversed(vs)):
                    chosen[(d, pt)] = v
    for f in lib.functions:
        base = VERSION_SUFFIX.sub("", f.decl_name)
        f.symbol = base
        v = chosen.get((f.decl_name, f.per_thread))
        if v is None:
            f.version, f.version_source = cuda_version, "CUDA_VERSION (no matching PFN typedef)"
        else:
            f.version, f.version_source = v, "PFN_%s_v%d%s" % (base, v, f.per_thread)


def _classify_returns(lib):
    for f in lib.functions:
        if f.ret_type == lib.status_type:
            f.ret_category = "status"
        elif f.ret_type == "void":
            f.ret_category = "void"
        else:
            f.ret_category = "value"


def _collect_unclassified(lib):
    for f in lib.functions:
        for p in f.params:
            if p.category == "pointer" and not p.direction:
                lib.unclassified.append("%s(%s %s)" % (f.name, p.type, p.name))


def _build(lib, decls, aliases, overrides, default_space, header, cxx_only=(), docs=None,
           header_only=False):
    """Model every declaration; header_only keeps the static inline definitions (NVTX's
    functions are nothing else) instead of skipping them as having no library symbol."""
    names = public_names(decls, aliases)
    for d in sorted(decls):
        cur = decls[d]
        reason = overrides.skip_reason(d)
        if not header_only and (cur.storage_class == ci.StorageClass.STATIC
                                or cur.is_definition()):
            lib.skipped.append(Skip(d, reason or "static inline helper defined in the header: "
                                    "no library symbol to wrap"))
            continue
        if reason:
            lib.skipped.append(Skip(d, reason))
            continue
        for name, pt in names[d]:
            variants = [""] + ([pt] if pt else [])
            for v in variants:
                f = build_function(lib.key, d, name + v, cur, overrides, default_space,
                                   header or os.path.basename(cur.location.file.name),
                                   (docs or {}).get(d))
                f.per_thread = v
                f.cxx_only = d in cxx_only
                lib.functions.append(f)
    lib.declared += len(decls)


def driver(include_dir, overrides):
    lib = Library(key="cuda", title="CUDA Driver API", headers=["cuda.h"],
                  status_type="CUresult", success="CUDA_SUCCESS")
    tu = parse(os.path.join(include_dir, "cuda.h"), include_dir)
    files = {"cuda.h"}
    decls = function_decls(tu, files)
    aliases = macro_aliases(tu, files)
    # cuda.h announces some per-thread variants only when per-thread streams are asked for.
    tu_pt = parse(os.path.join(include_dir, "cuda.h"), include_dir,
                  defines=["CUDA_API_PER_THREAD_DEFAULT_STREAM=1"])
    for name, (target, pt) in macro_aliases(tu_pt, files).items():
        if pt and name not in aliases:
            aliases[name] = (target, pt)
    cuda_version = macro_int(tu, "CUDA_VERSION")
    if cuda_version is None:
        raise GenError("cuda.h defines no CUDA_VERSION")
    lib.version_macro = {"CUDA_VERSION": cuda_version}
    _build(lib, decls, aliases, overrides, "host", "cuda.h")
    _assign_driver_versions(lib, decls, _pfn_versions(include_dir), cuda_version)
    lib.enums = enums(tu, files, "cuda.h")
    _classify_returns(lib)
    _collect_unclassified(lib)
    return lib


def cublas(include_dir, overrides):
    lib = Library(key="cublas", title="cuBLAS (v2 API)", headers=["cublas_api.h", "cublas_v2.h"],
                  status_type="cublasStatus_t", success="CUBLAS_STATUS_SUCCESS")
    path = os.path.join(include_dir, "cublas_v2.h")
    files = {"cublas_api.h"}
    tu_c = parse(path, include_dir, "c")
    tu_cxx = parse(path, include_dir, "c++")
    decls_c = function_decls(tu_c, files)
    decls_cxx = function_decls(tu_cxx, files)
    decls = dict(decls_c)
    cxx_only = set()
    for n, cur in decls_cxx.items():
        if n not in decls:
            decls[n] = cur
            cxx_only.add(n)
    aliases = macro_aliases(tu_c, {"cublas_v2.h", "cublas_api.h"})
    major = macro_int(tu_c, "CUBLAS_VER_MAJOR")
    if major is None:
        raise GenError("cublas_api.h defines no CUBLAS_VER_MAJOR")
    lib.version_macro = {"CUBLAS_VER_MAJOR": major}
    lib.sonames = ["libcublas.so.%d" % major, "libcublas.so"]
    _build(lib, decls, aliases, overrides, "device", "cublas_api.h", cxx_only)
    lib.enums = enums(tu_c, files, "cublas_api.h")
    _classify_returns(lib)
    _collect_unclassified(lib)
    return lib


def curand(include_dir, overrides):
    lib = Library(key="curand", title="cuRAND", headers=["curand.h"],
                  status_type="curandStatus_t", success="CURAND_STATUS_SUCCESS")
    tu = parse(os.path.join(include_dir, "curand.h"), include_dir)
    files = {"curand.h"}
    decls = function_decls(tu, files)
    aliases = macro_aliases(tu, files)
    major = macro_int(tu, "CURAND_VER_MAJOR")
    if major is None:
        raise GenError("curand.h defines no CURAND_VER_MAJOR")
    lib.version_macro = {"CURAND_VER_MAJOR": major}
    lib.sonames = ["libcurand.so.%d" % major, "libcurand.so"]
    _build(lib, decls, aliases, overrides, "device", "curand.h")
    lib.enums = enums(tu, files, "curand.h")
    _classify_returns(lib)
    _collect_unclassified(lib)
    return lib


def nvrtc(include_dir, overrides, cuda_major):
    lib = Library(key="nvrtc", title="NVRTC", headers=["nvrtc.h"],
                  status_type="nvrtcResult", success="NVRTC_SUCCESS")
    tu = parse(os.path.join(include_dir, "nvrtc.h"), include_dir)
    files = {"nvrtc.h"}
    decls = function_decls(tu, files)
    aliases = macro_aliases(tu, files)
    # nvrtc.h has no version macro: the library is the toolkit's (libnvrtc.so.13 for 13.x).
    lib.version_macro = {"CUDA_VERSION major": cuda_major}
    lib.sonames = ["libnvrtc.so.%d" % cuda_major, "libnvrtc.so"]
    _build(lib, decls, aliases, overrides, "host", "nvrtc.h")
    lib.enums = enums(tu, files, "nvrtc.h")
    _classify_returns(lib)
    _collect_unclassified(lib)
    return lib


VERSIONED_JITLINK = re.compile(r"^__nvJitLink\w+_\d+_\d+$")


def nvjitlink(include_dir, overrides, cuda_major):
    """nvJitLink.h declares each public function as a static inline wrapper of a symbol named
    for the release (nvJitLinkCreate calls __nvJitLinkCreate_13_0): the wrapper's name is the
    public one and the versioned symbol is what the library exports."""
    lib = Library(key="nvjitlink", title="nvJitLink", headers=["nvJitLink.h"],
                  status_type="nvJitLinkResult", success="NVJITLINK_SUCCESS")
    tu = parse(os.path.join(include_dir, "nvJitLink.h"), include_dir)
    files = {"nvJitLink.h"}
    decls = function_decls(tu, files)
    aliases = macro_aliases(tu, files)
    with open(os.path.join(include_dir, "nvJitLink.h")) as fh:
        text = fh.read()
    docs = {}
    for name, cur in list(decls.items()):
        if cur.storage_class != ci.StorageClass.STATIC:
            continue
        # The body (which libclang skips) names the symbol; the comment before the wrapper
        # is the function's documentation (an #ifndef between them hides it from libclang).
        m = re.search(r"static inline \w+\s+%s\s*\([^)]*\)[^{]*\{\s*return\s+(\w+)\s*\("
                      % re.escape(name), text)
        if not (m and VERSIONED_JITLINK.match(m.group(1)) and m.group(1) in decls):
            continue
        aliases[name] = (m.group(1), "")
        del decls[name]
        doc = re.search(r"(/\*\*(?:(?!\*/).)*\*/)\s*(?:#[^\n]*\n\s*)*\Z", text[:m.start()], re.S)
        if doc:
            docs[m.group(1)] = doc.group(1)
    lib.version_macro = {"CUDA_VERSION major": cuda_major}
    lib.sonames = ["libnvJitLink.so.%d" % cuda_major, "libnvJitLink.so"]
    _build(lib, decls, aliases, overrides, "host", "nvJitLink.h", docs=docs)
    # Only the wrappers' names are what a C user writes, not the versioned symbols'.
    lib.functions = [f for f in lib.functions if not VERSIONED_JITLINK.match(f.name)]
    lib.enums = enums(tu, files, "nvJitLink.h")
    _classify_returns(lib)
    _collect_unclassified(lib)
    return lib


def cublaslt(include_dir, overrides):
    """cuBLASLt returns cuBLAS's own cublasStatus_t: its codes are TC_CUBLAS_STATUS_*."""
    lib = Library(key="cublaslt", title="cuBLASLt", headers=["cublasLt.h"],
                  status_type="cublasStatus_t", success="CUBLAS_STATUS_SUCCESS")
    tu = parse(os.path.join(include_dir, "cublasLt.h"), include_dir)
    files = {"cublasLt.h"}
    decls = function_decls(tu, files)
    aliases = macro_aliases(tu, files)
    major = macro_int(tu, "CUBLAS_VER_MAJOR")
    if major is None:
        raise GenError("cublas_api.h (through cublasLt.h) defines no CUBLAS_VER_MAJOR")
    lib.version_macro = {"CUBLAS_VER_MAJOR": major}
    lib.sonames = ["libcublasLt.so.%d" % major, "libcublasLt.so"]
    _build(lib, decls, aliases, overrides, "host", "cublasLt.h")
    lib.enums = enums(tu, files | {"cublas_api.h"}, "cublasLt.h")
    _classify_returns(lib)
    _collect_unclassified(lib)
    return lib


def nvml(nvml_include, overrides):
    """NVML comes with the driver (libnvidia-ml.so.1); its header is not in every toolkit
    (PyPI's nvidia-nvml-dev carries it). Names such as nvmlInit are macros for the versioned
    symbols (nvmlInit_v2), which are what is resolved."""
    lib = Library(key="nvml", title="NVML", headers=["nvml.h"],
                  status_type="nvmlReturn_t", success="NVML_SUCCESS")
    tu = parse(os.path.join(nvml_include, "nvml.h"), nvml_include)
    files = {"nvml.h"}
    decls = function_decls(tu, files)
    aliases = macro_aliases(tu, files)
    major = macro_int(tu, "NVML_API_VERSION")
    if major is None:
        raise GenError("nvml.h defines no NVML_API_VERSION")
    lib.version_macro = {"NVML_API_VERSION": major}
    lib.sonames = ["libnvidia-ml.so.1", "libnvidia-ml.so"]
    _build(lib, decls, aliases, overrides, "host", "nvml.h")
    lib.enums = enums(tu, files, "nvml.h")
    _classify_returns(lib)
    _collect_unclassified(lib)
    return lib


def nvtx(include_dir, overrides):
    """NVTX v3 is header-only: nvToolsExt.h defines every function (static inline) and, on the
    first call, loads the tool named by NVTX_INJECTION64_PATH (Nsight Systems sets it); with
    no tool attached each call is a no-op. So there is no library to dlopen: the wrappers call
    the header's own definitions, which do the lazy loading, under NVIDIA's variable."""
    lib = Library(key="nvtx", title="NVTX", headers=["nvtx3/nvToolsExt.h",
                                                     "nvtx3/nvToolsExtCuda.h"],
                  status_type="", success="", direct=True)
    path = os.path.join(include_dir, "nvtx3", "nvToolsExtCuda.h")
    tu = parse(path, include_dir)
    files = {"nvToolsExt.h", "nvToolsExtCuda.h"}
    decls = function_decls(tu, files)
    aliases = macro_aliases(tu, files)
    major = macro_int(tu, "NVTX_VERSION")
    if major is None:
        raise GenError("nvtx3/nvToolsExt.h defines no NVTX_VERSION")
    lib.version_macro = {"NVTX_VERSION": major}
    _build(lib, decls, aliases, overrides, "host", None, header_only=True)
    lib.enums = enums(tu, files, "nvToolsExt.h")
    _classify_returns(lib)
    _collect_unclassified(lib)
    return lib


def nccl(nccl_include, cuda_include, overrides):
    """NCCL is released apart from CUDA (libnccl.so.2 for every 2.x) and its header may live
    apart from the toolkit's: nccl.h is parsed with the toolkit's include directory first, so
    that its cuda_runtime.h is the release's. nccl.h writes its documentation as plain
    comments; each function is declared twice, under its name and under the profiling
    interface's pnccl name (skipped: gen/overrides.toml)."""
    lib = Library(key="nccl", title="NCCL", headers=["nccl.h"],
                  status_type="ncclResult_t", success="ncclSuccess")
    tu = parse(os.path.join(nccl_include, "nccl.h"), cuda_include,
               more_includes=[nccl_include], all_comments=True)
    files = {"nccl.h"}
    decls = function_decls(tu, files)
    aliases = macro_aliases(tu, files)
    major = macro_int(tu, "NCCL_MAJOR")
    if major is None:
        raise GenError("nccl.h defines no NCCL_MAJOR")
    lib.version_macro = {"NCCL_MAJOR": major}
    lib.sonames = ["libnccl.so.%d" % major, "libnccl.so"]
    # nccl.h documents a few functions above their pnccl declaration (ncclRecv's comment
    # precedes pncclRecv): the documentation is the pair's.
    docs = {}
    for name, cur in decls.items():
        twin = decls.get("p" + name)
        if not cur.raw_comment and twin is not None and twin.raw_comment:
            docs[name] = twin.raw_comment
    _build(lib, decls, aliases, overrides, "device", "nccl.h", docs=docs)
    lib.enums = enums(tu, files, "nccl.h")
    _classify_returns(lib)
    _collect_unclassified(lib)
    return lib
