#!/usr/bin/env python3
"""Generate thincuda's C bindings (generated/) from the CUDA headers, nvml.h and nccl.h.

Usage: gen/thincuda_gen.py [--cuda-include DIR] [--nvml-include DIR] [--nccl-include DIR]
                           [--out DIR] [--check]
       gen/thincuda_gen.py kernels --prefix my_ --out DIR [--image FATBIN] file.cu...
         (launchers for a project's own kernels, in a module of their own)
"""

import argparse
import collections
import difflib
import os
import re
import sys
import tomllib

import jinja2

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import kernels  # noqa: E402
import libraries  # noqa: E402
from paths import default_include, default_nccl_include, default_nvml_include  # noqa: E402
from model import GenError, Overrides  # noqa: E402

# The libraries loaded at run time, in the order of their tc_lib ids (and of the loader's
# table). NVTX is not among them: its header defines its functions (libraries.nvtx).
LIB_IDS = {"thincuda": 0, "cuda": 1, "cublas": 2, "curand": 3, "nvrtc": 4, "nvjitlink": 5,
           "cublaslt": 6, "nvml": 7, "nccl": 8}
LIB_ENUM = {"thincuda": "TC_LIB_THINCUDA", "cuda": "TC_LIB_CUDA", "cublas": "TC_LIB_CUBLAS",
            "curand": "TC_LIB_CURAND", "nvrtc": "TC_LIB_NVRTC", "nvjitlink": "TC_LIB_NVJITLINK",
            "cublaslt": "TC_LIB_CUBLASLT", "nvml": "TC_LIB_NVML", "nccl": "TC_LIB_NCCL"}
LIB_TITLE = {"thincuda": "thincuda", "cuda": "CUDA driver", "cublas": "cuBLAS",
             "curand": "cuRAND", "nvrtc": "NVRTC", "nvjitlink": "nvJitLink",
             "cublaslt": "cuBLASLt", "nvml": "NVML", "nccl": "NCCL", "nvtx": "NVTX"}
LIB_ENV = {"cuda": "THINCUDA_LIBCUDA", "cublas": "THINCUDA_LIBCUBLAS",
           "curand": "THINCUDA_LIBCURAND", "nvrtc": "THINCUDA_LIBNVRTC",
           "nvjitlink": "THINCUDA_LIBNVJITLINK", "cublaslt": "THINCUDA_LIBCUBLASLT",
           "nvml": "THINCUDA_LIBNVML", "nccl": "THINCUDA_LIBNCCL"}
STATUS_ENUMS = {"cuda": "CUresult", "cublas": "cublasStatus_t", "curand": "curandStatus_t",
                "nvrtc": "nvrtcResult", "nvjitlink": "nvJitLinkResult", "nvml": "nvmlReturn_t",
                "nccl": "ncclResult_t"}
# cuBLASLt returns cuBLAS's cublasStatus_t: its failures are TC_CUBLAS_STATUS_* codes, and
# tc_last_error() names the cublasLt function.
STATUS_LIB = {"cublaslt": "cublas"}
INCLUDES = {"cuda": ["cuda.h"], "cublas": ["cublas_v2.h"], "curand": ["curand.h"],
            "nvrtc": ["nvrtc.h"], "nvjitlink": ["nvJitLink.h"], "cublaslt": ["cublasLt.h"],
            "nvml": ["nvml.h"], "nccl": ["nccl.h"], "nvtx": ["nvtx3/nvToolsExtCuda.h"]}
HEADER_LIST = ("cuda.h, cublas_api.h, cublasLt.h, curand.h, nvrtc.h, nvJitLink.h, "
               "nvToolsExt.h, nvml.h, nccl.h")
SCALAR_OUT = {"int", "uint", "float", "enum", "pointer", "char"}


def c_string(s):
    """Render a Python string as a C string literal."""
    out = s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return '"%s"' % out


def doc_sentence(doc):
    """Turn an enum constant's doc comment into one line of words."""
    text = re.sub(r"^\s*(/\*\*<?|///<?|//!<?)\s*", "", doc or "")
    text = re.sub(r"\s*\*/\s*$", "", text)
    text = " ".join(l.strip().lstrip("*").strip() for l in text.splitlines())
    text = re.sub(r"\\(p|ref|c|e)\s+", "", text).replace("::", "")
    return re.sub(r"\s+", " ", text).strip()


# Documentation words that mark a code after which the context is lost (tc_status_is_sticky).
STICKY_WORDS = ("relaunched", "cannot be used anymore", "inconsistent state")


def status_hints(codes, hints, cuda_version):
    """Attach tc_status_hint's words ({cuda} filled in; {driver} is filled in at run time) and
    the oom/sticky flags to each code; return warnings for codes without an entry in
    gen/hints.toml and for entries that name no code of these headers."""
    words, flags = hints["hint"], hints["flags"]
    warnings = []
    for c in codes:
        h = words.get(c["name"])
        if h is None:
            warnings.append("status %s has no hint in gen/hints.toml (add one, or \"none\")"
                            % c["name"])
            h = "none"
        c["hint_c"] = "NULL" if h == "none" else c_string(h.replace("{cuda}", cuda_version))
        f = []
        if c["name"] in flags["oom"]:
            f.append("TC__OOM")
        if c["name"] in flags["sticky"] or any(w in c["string"] for w in STICKY_WORDS):
            f.append("TC__STICKY")
        c["flags"] = " | ".join(f) or "0"
    names = {c["name"] for c in codes}
    for n in sorted(set(words) | set(flags["oom"]) | set(flags["sticky"])):
        if n not in names:
            warnings.append("gen/hints.toml names a status these headers lack: %s" % n)
    return warnings


def status_codes(libs, own, overrides):
    codes = []
    for c in own:
        codes.append(dict(enum=c["name"], name=c["name"], value=c["value"], lib="thincuda",
                          string=c["string"]))
    for lib in libs:
        if lib.key not in STATUS_ENUMS:
            continue
        target = STATUS_ENUMS[lib.key]
        found = [e for e in lib.enums if e.name == target]
        if not found:
            raise GenError("%s: no enum %s found" % (lib.key, target))
        seen = set()
        for k in found[0].consts:
            if k.value == 0 or k.value in seen or k.name in overrides.not_status:
                continue
            seen.add(k.value)
            words = doc_sentence(k.doc) or overrides.status_strings.get(k.name, "")
            if not words:
                raise GenError("%s has no documentation and no status_string override" % k.name)
            codes.append(dict(enum="TC_" + k.name, name=k.name, value=k.value, lib=lib.key,
                              string=words))
    for c in codes:
        c["full"] = (LIB_IDS[c["lib"]] << 24) | c["value"]
        c["hex"] = "0x%08X" % c["full"]
        c["string_c"] = c_string(c["string"])
    codes.sort(key=lambda c: c["full"])
    return codes


# Enums whose value/name tables are public (tc_enum_<Name>): the runtime lists every device
# attribute the driver reports from this table.
PUBLIC_ENUMS = {"cuda": ["CUdevice_attribute"]}


def public_enums(lib):
    out = []
    for name in PUBLIC_ENUMS.get(lib.key, []):
        e = next((e for e in lib.enums if e.name == name), None)
        if e is None:
            raise GenError("%s: public enum %s not found" % (lib.key, name))
        seen, consts = set(), []
        for k in sorted(e.consts, key=lambda k: k.value):
            if k.value not in seen and not k.name.endswith("_MAX"):
                seen.add(k.value)
                consts.append(k)
        out.append(dict(name=name, consts=consts))
    return out


def enum_tables(lib):
    """Name tables for the named enums that appear in this library's parameters."""
    used = set()
    for f in lib.functions:
        for p in f.params:
            if p.enum:
                used.add(p.enum)
            if p.pointee_enum:
                used.add(p.pointee_enum)
    out = {}
    for e in lib.enums:
        if e.name and e.name in used and e.name not in out:
            seen, consts = set(), []
            for k in e.consts:
                if k.value not in seen:
                    seen.add(k.value)
                    consts.append(k)
            out[e.name] = dict(fname=re.sub(r"\W", "_", e.name), consts=consts)
    return out


def annotate(p):
    if p.category != "pointer":
        return p.decl
    words = [p.direction]
    if p.space == "device":
        words.append("device")
    if p.nullable:
        words.append("nullable")
    return "%s /* %s */" % (p.decl, ", ".join(words))


def trace_in(p, tables):
    n = p.name
    if p.category == "int":
        return 'tc__tl_i(&tc__tl, "%s", (long long)%s);' % (n, n)
    if p.category == "uint":
        return 'tc__tl_u(&tc__tl, "%s", (unsigned long long)%s);' % (n, n)
    if p.category == "float":
        return 'tc__tl_f(&tc__tl, "%s", (double)%s);' % (n, n)
    if p.category == "enum":
        e = tables.get(p.enum)
        name = "ename_%s((long long)%s)" % (e["fname"], n) if e else "NULL"
        return 'tc__tl_e(&tc__tl, "%s", (long long)%s, %s);' % (n, n, name)
    if p.category == "pointer" and p.pointee == "char" and p.pointee_const:
        return 'tc__tl_s(&tc__tl, "%s", %s);' % (n, n)
    if p.category in ("pointer", "handle"):
        return 'tc__tl_p(&tc__tl, "%s", (const void *)%s);' % (n, n)
    if p.category == "fnptr":
        return 'tc__tl_text(&tc__tl, "%s", %s ? "<function>" : "NULL");' % (n, n)
    return 'tc__tl_text(&tc__tl, "%s", "{...}");' % n


def trace_out(p, tables):
    """Print a host out-parameter's value after a successful call."""
    if (p.category != "pointer" or p.direction not in ("out", "inout") or p.space != "host"
            or p.pointee not in SCALAR_OUT):
        return None
    n, v = p.name, "*" + p.name
    if p.pointee == "char":
        return 'if (%s) tc__tl_s(&tc__tl, "%s", %s);' % (n, n, n)
    if p.pointee == "int":
        body = 'tc__tl_i(&tc__tl, "%s", (long long)%s);' % (v, v)
    elif p.pointee == "uint":
        body = 'tc__tl_u(&tc__tl, "%s", (unsigned long long)%s);' % (v, v)
    elif p.pointee == "float":
        body = 'tc__tl_f(&tc__tl, "%s", (double)%s);' % (v, v)
    elif p.pointee == "enum":
        e = tables.get(p.pointee_enum)
        name = "ename_%s((long long)%s)" % (e["fname"], v) if e else "NULL"
        body = 'tc__tl_e(&tc__tl, "%s", (long long)%s, %s);' % (v, v, name)
    else:
        body = 'tc__tl_p(&tc__tl, "%s", (const void *)%s);' % (v, v)
    return "if (%s) %s" % (n, body)


def render_function(f, lib, fid, tables):
    params = list(f.params)
    decls = [p.decl for p in params]
    protos = [annotate(p) for p in params]
    args = [p.name for p in params]
    call = "%s(%s)" % (f.decl_name if lib.direct else "tc__fn", ", ".join(args))
    lib_enum = LIB_ENUM[STATUS_LIB.get(lib.key, lib.key)] if not lib.direct else ""
    outs = [s for s in (trace_out(p, tables) for p in params) if s]
    # The out-parameter for a returned value; nvrtcGetErrorString's own parameter is `result`.
    rv = "result_out" if "result" in args else "result"
    if f.ret_category == "value":
        decls.append("%s *%s" % (f.ret_type, rv))
        protos.append("%s *%s /* out: the function's return value */" % (f.ret_type, rv))
        slow = ("        %s tc__r = %s;\n        if (%s)\n            *%s = tc__r;\n        tc__st = TC_OK;"
                % (f.ret_type, call, rv, rv))
        fast = ("    %s tc__r = %s;\n    if (%s)\n        *%s = tc__r;\n    return TC_OK;"
                % (f.ret_type, call, rv, rv))
        if f.ret_type.endswith("*") and "char" in f.ret_type:
            outs.append('if (%s) tc__tl_s(&tc__tl, "*%s", *%s);' % (rv, rv, rv))
        else:
            outs.append('if (%s) tc__tl_u(&tc__tl, "*%s", (unsigned long long)*%s);'
                        % (rv, rv, rv))
    elif f.ret_category == "void":
        slow = "        %s;\n        tc__st = TC_OK;" % call
        fast = "    %s;\n    return TC_OK;" % call
    else:
        slow = ("        %s tc__r = %s;\n        tc__st = tc__r == %s ? TC_OK : tc__fail(%s, (int)tc__r, %d);"
                % (f.ret_type, call, lib.success, lib_enum, fid))
        fast = ("    %s tc__r = %s;\n    return TC__LIKELY(tc__r == %s) ? TC_OK : tc__fail(%s, (int)tc__r, %d);"
                % (f.ret_type, call, lib.success, lib_enum, fid))
    if lib.direct:
        slow = "\n".join(l[4:] for l in slow.split("\n"))
    all_args = args + ([rv] if f.ret_category == "value" else [])
    return dict(name=f.name, doc=f.doc, deprecated=f.deprecated, id=fid,
                proto=", ".join(protos) or "void", params=", ".join(decls) or "void",
                pfn_params=", ".join(p.decl for p in params) or "void",
                args=", ".join(all_args), ret_type=f.ret_type, call_block=slow, fast_block=fast,
                trace_in=[trace_in(p, tables) for p in params], trace_out=outs,
                base=f.name[:-len(f.per_thread)] if f.per_thread else f.name,
                per_thread=f.per_thread)


def build(include_dir, nvml_include=None, nccl_include=None):
    with open(os.path.join(HERE, "overrides.toml"), "rb") as fh:
        overrides = Overrides(tomllib.load(fh))
    with open(os.path.join(HERE, "status.toml"), "rb") as fh:
        own = tomllib.load(fh)["code"]
    libs = [libraries.driver(include_dir, overrides), libraries.cublas(include_dir, overrides),
            libraries.curand(include_dir, overrides)]
    cuda_major = libs[0].version_macro["CUDA_VERSION"] // 1000
    nvml_include = nvml_include or default_nvml_include(include_dir)
    if not os.path.isfile(os.path.join(nvml_include, "nvml.h")):
        raise GenError("nvml.h is not in %s: pip install -r gen/requirements.txt (PyPI's "
                       "nvidia-nvml-dev carries it) or pass --nvml-include DIR" % nvml_include)
    nccl_include = nccl_include or default_nccl_include(include_dir)
    if not os.path.isfile(os.path.join(nccl_include, "nccl.h")):
        raise GenError("nccl.h is not in %s (nor in an NVIDIA NCCL wheel, the toolkit nvcc "
                       "belongs to, /usr/include or /usr/local/include): install NCCL's header "
                       "(pip install nvidia-nccl-cu13, or apt-get install libnccl-dev) or pass "
                       "--nccl-include DIR" % nccl_include)
    libs += [libraries.nvrtc(include_dir, overrides, cuda_major),
             libraries.nvjitlink(include_dir, overrides, cuda_major),
             libraries.cublaslt(include_dir, overrides),
             libraries.nvml(nvml_include, overrides),
             libraries.nccl(nccl_include, include_dir, overrides),
             libraries.nvtx(include_dir, overrides)]
    # A rule with cuda_before = N is for older releases only: not stale in newer headers.
    unused = [r for i, r in enumerate(overrides.pointer_rules) if i not in overrides.used
              and libs[0].version_macro["CUDA_VERSION"] < r.get("cuda_before", 1 << 30)]
    return libs, own, overrides, unused


def kernel_check(p):
    """The _Generic expression a launcher macro wraps around one argument."""
    if p.pointer and p.const_pointee:
        return "TC__KARG_CONST(%s, %s, %s)" % (p.c_type, p.c_type[len("const "):], p.name)
    return "TC__KARG(%s, %s)" % (p.c_type, p.name)


def render_kernels(env, kernels_dir):
    """Render tc_kernels.h/.c: typed launchers for every kernel in kernels_dir/*.cu."""
    ks = kernels.read_all(kernels_dir)
    banner = ("/* Generated by gen/thincuda_gen.py from the kernels in kernels/. "
              "Do not edit: run tools/regen. */")
    rows, c_sizes = [], {}
    for k in ks:
        params = []
        for p in k.params:
            if p.name in ("cfg", "args") or not p.name:
                raise GenError("%s:%d: %s: parameter name '%s' is reserved by the launcher"
                               % (k.file, k.line, k.name, p.name))
            decl = p.c_type + p.name if p.c_type.endswith("*") else "%s %s" % (p.c_type, p.name)
            params.append(dict(name=p.name, decl=decl, size=p.size, check=kernel_check(p)))
            c_sizes[p.c_type] = p.size
        rows.append(dict(name=k.name, file=k.file, line=k.line, doc=k.doc.replace("*/", "* /"),
                         enum="TC_KERNEL_" + k.short.upper(), launcher="tc_launch_" + k.short,
                         params=params))
    return {
        "tc_kernels.h": env.get_template("tc_kernels.h.j2").render(
            banner=banner, kernels=rows, tensor_maps="CUtensorMap" in c_sizes),
        "tc_kernels.c": env.get_template("tc_kernels.c.j2").render(
            banner=banner, kernels=rows, c_sizes=sorted(c_sizes.items())),
    }


def render(include_dir, kernels_dir=os.path.join(ROOT, "kernels"), warnings=None,
           nvml_include=None, nccl_include=None):
    """Return ({relative path: text} for everything generated/ holds, problems). Override
    rules that match nothing and hint table gaps are problems too, unless a `warnings` list is
    given to receive them (they may belong to another CUDA release)."""
    libs, own, overrides, unused = build(include_dir, nvml_include, nccl_include)
    cuda_version = libs[0].version_macro["CUDA_VERSION"]
    vstr = "%d.%d" % (cuda_version // 1000, cuda_version % 1000 // 10)
    banner_text = ("Generated by gen/thincuda_gen.py from the CUDA %s headers "
                   "(%s). Do not edit: run tools/regen." % (vstr, HEADER_LIST))
    banner = "/* %s */" % banner_text
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(os.path.join(ROOT, "templates")),
                             trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
                             undefined=jinja2.StrictUndefined)

    allf = sorted(((f.name, lib, f) for lib in libs for f in lib.functions),
                  key=lambda t: t[0])
    names = [n for n, _, _ in allf]
    dup_check = names
    allf = [t for t in allf if not t[1].direct]
    names = [n for n, _, _ in allf]
    if len(set(dup_check)) != len(dup_check):
        dup = [n for n, c in collections.Counter(dup_check).items() if c > 1]
        raise GenError("two wrappers would share a name: %s" % ", ".join(dup[:10]))
    ids = {n: i for i, n in enumerate(names)}
    syms = []
    # The table's names, each once, at offsets into one string (offset 0: the empty one).
    blob, at, end = [], {}, [1]

    def offset(name):
        if name not in at:
            at[name] = end[0]
            end[0] += len(name) + 1
            blob.append(name)
        return at[name]

    for n, lib, f in allf:
        exported = f.decl_name + f.per_thread if lib.key == "cuda" else f.decl_name
        if not re.fullmatch(r"\w+", n + f.symbol + exported) or not 0 <= f.version < 65536:
            raise GenError("%s: a name or version the symbol table cannot hold" % n)
        # A name that repeats the one before it is 0 in the table (tc_internal.h).
        syms.append(dict(name=n, name_at=offset(n),
                         symbol_at=0 if f.symbol == n else offset(f.symbol),
                         exported_at=0 if exported == f.symbol else offset(exported),
                         version=f.version, lib=LIB_IDS[lib.key], pt=1 if f.per_thread else 0))

    lib_rows = [dict(key=k, id=LIB_IDS[k], enum=LIB_ENUM[k], title=LIB_TITLE[k])
                for k in LIB_IDS]
    loader_libs = []
    for lib in sorted((l for l in libs if not l.direct), key=lambda l: LIB_IDS[l.key]):
        sonames = ["libcuda.so.1", "libcuda.so"] if lib.key == "cuda" else lib.sonames
        loader_libs.append(dict(key=lib.key, env_c=c_string(LIB_ENV[lib.key]),
                                sonames_c=c_string(":".join(sonames))))
    codes = status_codes(libs, own, overrides)
    with open(os.path.join(HERE, "hints.toml"), "rb") as fh:
        hint_warnings = status_hints(codes, tomllib.load(fh), vstr)

    out = {}
    out["tc_status.h"] = env.get_template("tc_status.h.j2").render(
        banner=banner, libs=lib_rows, codes=codes)
    out["tc_status.c"] = env.get_template("tc_status.c.j2").render(
        banner=banner, libs=lib_rows, codes=codes)
    out["tc_bindings.h"] = env.get_template("tc_bindings.h.j2").render(
        banner=banner, cuda_version=cuda_version)
    out["tc_internal.h"] = env.get_template("tc_internal.h.j2").render(
        banner=banner, nsyms=len(syms))
    out["tc_loader.c"] = env.get_template("tc_loader.c.j2").render(
        banner=banner, libs=loader_libs)
    out["tc_symbols.c"] = env.get_template("tc_symbols.c.j2").render(banner=banner, syms=syms,
                                                                     names=blob)
    for lib in libs:
        tables = enum_tables(lib)
        funcs = [render_function(f, lib, ids.get(f.name, -1), tables)
                 for f in sorted(lib.functions, key=lambda f: (f.header, f.line, f.name))]
        pt = [f for f in funcs if f["per_thread"]]
        pub = public_enums(lib)
        out["tc_%s.h" % lib.key] = env.get_template("tc_lib.h.j2").render(
            banner=banner, lib=lib, funcs=funcs, includes=INCLUDES[lib.key], per_thread=pt,
            public_enums=pub)
        out["tc_%s.c" % lib.key] = env.get_template("tc_lib.c.j2").render(
            banner=banner, lib=lib, funcs=funcs, enums=list(tables.values()), public_enums=pub)
    cov = []
    for lib in libs:
        srcs = collections.Counter(p.source for f in lib.functions for p in f.params
                                   if p.category == "pointer")
        cov.append(dict(key=lib.key, title=lib.title, headers=lib.headers, declared=lib.declared,
                        skipped=lib.skipped, functions=lib.functions,
                        sonames=lib.sonames, direct=lib.direct,
                        shared_status=LIB_TITLE.get(STATUS_LIB.get(lib.key, ""), ""),
                        version_pfn=sum(1 for f in lib.functions
                                        if f.version_source.startswith("PFN")),
                        version_fallback=sum(1 for f in lib.functions
                                             if f.version_source.startswith("CUDA_VERSION")),
                        cxx_only=sorted({f.decl_name for f in lib.functions if f.cxx_only}),
                        pointer_total=sum(srcs.values()),
                        pointer_sources=sorted((k or "none", v) for k, v in srcs.items()),
                        unclassified=lib.unclassified))
    out["COVERAGE.md"] = env.get_template("COVERAGE.md.j2").render(
        banner_text=banner_text, libs=cov, cuda_version_str=vstr)
    out.update(render_kernels(env, kernels_dir))
    problems = []
    for lib in libs:
        problems += ["unclassified pointer parameter: %s" % u for u in lib.unclassified]
    soft = ["override rule matches nothing in these headers: %s" % r for r in unused]
    soft += hint_warnings
    if warnings is None:
        problems += soft
    else:
        warnings.extend(soft)
    return out, problems


# ---------------------------------------------------------------- API difference summary

PROTO = re.compile(r"^(TC_DEPRECATED )?TC_API tc_status tc_(\w+)\((.*)\);$", re.M)
STATUS_ROW = re.compile(r"^    TC_(\w+) = 0x[0-9A-F]{8},$", re.M)
RELEASE = re.compile(r"from the CUDA (\S+) headers")
SUMMARY_HEADERS = (("cuda", "cuda.h"), ("cublas", "cublas_api.h"), ("curand", "curand.h"),
                   ("nvrtc", "nvrtc.h"), ("nvjitlink", "nvJitLink.h"),
                   ("cublaslt", "cublasLt.h"), ("nvml", "nvml.h"), ("nccl", "nccl.h"),
                   ("nvtx", "nvToolsExt.h"))


def _split_params(params):
    """Split a parameter list at its top-level commas."""
    out, depth, cur = [], 0, ""
    for ch in params:
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
            continue
        depth += ch in "([" and 1 or ch in ")]" and -1 or 0
        cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def _param_type(p):
    """A parameter's type without its name, so that renamed parameters are no change."""
    p = re.sub(r"\s+", " ", p)
    if "(*" in p:
        return re.sub(r"\(\*\s*\w*\s*\)", "(*)", p, count=1)
    m = re.match(r"^(.*?[\s*])(\w+)(\s*\[[^\]]*\])*$", p)
    if m and m.group(1).strip() and m.group(1).strip() not in ("const", "unsigned", "signed"):
        return (m.group(1) + (m.group(3) or "")).strip()
    return p


def api_of(header_text):
    """{public name: (prototype without annotations, parameter types, deprecated)} of a
    generated library header."""
    out = {}
    for dep, name, params in PROTO.findall(header_text):
        params = re.sub(r"\s*/\*.*?\*/", "", params)
        types = tuple(_param_type(p) for p in _split_params(params))
        out[name] = ("%s(%s)" % (name, params), types, bool(dep))
    return out


def api_changes(old_files, new_files):
    """The difference between two renders of generated/ (the committed one and a new one):
    per header the functions added, removed, with changed parameter types and newly
    deprecated, and the status codes added and removed."""
    def release(files):
        m = RELEASE.search(files.get("tc_status.h", ""))
        return m.group(1) if m else "unknown"

    headers = []
    for key, header in SUMMARY_HEADERS:
        old = api_of(old_files.get("tc_%s.h" % key, ""))
        new = api_of(new_files["tc_%s.h" % key])
        both = sorted(set(old) & set(new))
        headers.append(dict(
            header=header, title=LIB_TITLE[key],
            added=[new[n][0] for n in sorted(set(new) - set(old))],
            removed=[old[n][0] for n in sorted(set(old) - set(new))],
            changed=[(old[n][0], new[n][0]) for n in both if old[n][1] != new[n][1]],
            deprecated=[n for n in both if new[n][2] and not old[n][2]]))
    old_st = set(STATUS_ROW.findall(old_files.get("tc_status.h", "")))
    new_st = set(STATUS_ROW.findall(new_files["tc_status.h"]))
    return dict(old=release(old_files), new=release(new_files), headers=headers,
                status_added=sorted(new_st - old_st), status_removed=sorted(old_st - new_st))


def changes_empty(ch):
    return (ch["old"] == ch["new"] and not ch["status_added"] and not ch["status_removed"]
            and not any(h[k] for h in ch["headers"]
                        for k in ("added", "removed", "changed", "deprecated")))


def changes_console(ch, limit=8):
    """A few lines for the terminal: counts per header and the first names."""
    def names(protos):
        short = [p.split("(")[0] for p in protos]
        more = " and %d more" % (len(short) - limit) if len(short) > limit else ""
        return ", ".join(short[:limit]) + more

    lines = ["API difference against the committed generated/ (CUDA %s -> %s):"
             % (ch["old"], ch["new"])]
    for h in ch["headers"]:
        lines.append("  %s: %d added, %d removed, %d changed signature, %d newly deprecated"
                     % (h["header"], len(h["added"]), len(h["removed"]), len(h["changed"]),
                        len(h["deprecated"])))
        for word, protos in (("added", h["added"]), ("removed", h["removed"]),
                             ("changed", [n for _, n in h["changed"]])):
            if protos:
                lines.append("    %s: %s" % (word, names(protos)))
    lines.append("  status codes: %d added, %d removed"
                 % (len(ch["status_added"]), len(ch["status_removed"])))
    return "\n".join(lines)


def changes_markdown(ch):
    """generated/CHANGES.md: the whole difference, every name and signature."""
    out = ["<!-- Written by tools/regen when the API differs from the generated/ it replaces. "
           "Do not edit: run tools/regen. -->",
           "# API changes: CUDA %s -> CUDA %s" % (ch["old"], ch["new"]), ""]
    for h in ch["headers"]:
        out.append("## %s (`%s`): %d added, %d removed, %d changed, %d newly deprecated"
                   % (h["title"], h["header"], len(h["added"]), len(h["removed"]),
                      len(h["changed"]), len(h["deprecated"])))
        out.append("")
        for word, protos in (("Added", h["added"]), ("Removed", h["removed"])):
            if protos:
                out.append("%s:" % word)
                out.append("")
                out += ["- `%s`" % p for p in protos]
                out.append("")
        if h["changed"]:
            out.append("Changed signature (before, after):")
            out.append("")
            for old, new in h["changed"]:
                out.append("- `%s`" % old)
                out.append("  `%s`" % new)
            out.append("")
        if h["deprecated"]:
            out.append("Newly deprecated: %s" % ", ".join("`%s`" % n for n in h["deprecated"]))
            out.append("")
    out.append("## Status codes: %d added, %d removed"
               % (len(ch["status_added"]), len(ch["status_removed"])))
    out.append("")
    for word, names in (("Added", ch["status_added"]), ("Removed", ch["status_removed"])):
        if names:
            out.append("%s: %s" % (word, ", ".join("`%s`" % n for n in names)))
            out.append("")
    return "\n".join(out).rstrip() + "\n"


def render_user_kernels(paths, prefix, image=None, targets=""):
    """Render <prefix>kernels.h/.c for a project's own kernels: launchers taking the module
    (runtime/kmodule.h), the kernel table and, when given, the image (fatbin, cubin or PTX)
    embedded as bytes."""
    if not re.fullmatch(r"[A-Za-z_]\w*_", prefix):
        raise GenError("--prefix must be a C identifier ending in _ (my_), not %r" % prefix)
    ks = []
    for path in paths:
        ks += kernels.read_file(os.path.abspath(path), os.path.dirname(os.path.abspath(path)),
                                prefix=None)
    names = collections.Counter(k.name for k in ks)
    dup = [n for n, c in names.items() if c > 1]
    if dup:
        raise GenError("kernels defined twice: %s" % ", ".join(dup))
    module = prefix[:-1]
    header = prefix + "kernels.h"
    banner = ("/* Generated by thincuda_gen.py kernels from %s. Do not edit: run it again. */"
              % ", ".join(os.path.basename(p) for p in paths))
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(os.path.join(ROOT, "templates")),
                             trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
                             undefined=jinja2.StrictUndefined)
    rows, c_sizes = [], {}
    for k in ks:
        params = []
        for p in k.params:
            if p.name in ("m", "cfg", "args") or not p.name:
                raise GenError("%s:%d: %s: parameter name '%s' is reserved by the launcher"
                               % (k.file, k.line, k.name, p.name))
            decl = p.c_type + p.name if p.c_type.endswith("*") else "%s %s" % (p.c_type, p.name)
            params.append(dict(name=p.name, decl=decl, size=p.size, check=kernel_check(p)))
            c_sizes[p.c_type] = p.size
        rows.append(dict(name=k.name, file=k.file, line=k.line, doc=k.doc.replace("*/", "* /"),
                         enum="%sKERNEL_%s" % (prefix.upper(), k.short.upper()),
                         launcher="%slaunch_%s" % (prefix, k.short), params=params))
    data = b""
    if image:
        with open(image, "rb") as fh:
            data = fh.read()
        if data and b"\0" not in data[-1:]:
            data += b"\0"  # PTX is text: cuModuleLoadData wants it NUL-terminated
    image_rows = [", ".join("0x%02x" % b for b in data[i:i + 16]) + ","
                  for i in range(0, len(data), 16)]
    common = dict(banner=banner, module=module, prefix=prefix, kernels=rows,
                  spec=prefix + "kernels", sources=", ".join(os.path.basename(p) for p in paths))
    return {
        header: env.get_template("user_kernels.h.j2").render(
            guard=prefix.upper() + "KERNELS_H", count_enum=prefix.upper() + "KERNEL_COUNT",
            **common),
        prefix + "kernels.c": env.get_template("user_kernels.c.j2").render(
            header=header, c_sizes=sorted(c_sizes.items()), image_rows=image_rows,
            image_bytes=len(data), targets=targets.replace('"', "'"),
            image_note=("%s, %d bytes" % (os.path.basename(image), len(data))) if image
            else "none: tc_kmodule_create reports TC_ERR_NO_KERNEL_IMAGE", **common),
    }


def kernels_main(argv):
    ap = argparse.ArgumentParser(prog="thincuda_gen.py kernels",
                                 description="Launchers for a project's own kernels, in a module "
                                 "of their own: <prefix>kernels.h and <prefix>kernels.c.")
    ap.add_argument("--prefix", required=True, help="C prefix of the names written (my_)")
    ap.add_argument("--out", required=True, help="directory for the two files")
    ap.add_argument("--image", help="the fatbin (or cubin, or PTX) nvcc made of the same files")
    ap.add_argument("--targets", default="", help="what the image was built for, for messages")
    ap.add_argument("sources", nargs="+", help=".cu files with extern \"C\" __global__ kernels")
    a = ap.parse_args(argv)
    try:
        files = render_user_kernels(a.sources, a.prefix, a.image, a.targets)
    except GenError as e:
        print("thincuda_gen: error: %s" % e, file=sys.stderr)
        return 2
    os.makedirs(a.out, exist_ok=True)
    for rel, text in sorted(files.items()):
        with open(os.path.join(a.out, rel), "w") as fh:
            fh.write(text)
    return 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["kernels"]:
        return kernels_main(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cuda-include", default=default_include(),
                    help="directory holding cuda.h, cudaTypedefs.h, cublas_v2.h, curand.h")
    ap.add_argument("--nvml-include", default=None,
                    help="directory holding nvml.h (default: --cuda-include when it has one, "
                    "else PyPI's nvidia-nvml-dev)")
    ap.add_argument("--nccl-include", default=None,
                    help="directory holding nccl.h (default: --cuda-include when it has one, "
                    "else an NVIDIA NCCL wheel's, nvcc's toolkit's, /usr/include, "
                    "/usr/local/include)")
    ap.add_argument("--out", default=os.path.join(ROOT, "generated"))
    ap.add_argument("--kernels", default=os.path.join(ROOT, "kernels"),
                    help="directory of the .cu files whose launchers tc_kernels.h holds")
    ap.add_argument("--check", action="store_true",
                    help="compare with --out instead of writing; exit 1 on any difference")
    ap.add_argument("--allow-problems", action="store_true",
                    help="write output even with unclassified pointer parameters")
    a = ap.parse_args(argv)
    warnings = []
    try:
        files, problems = render(a.cuda_include, a.kernels, warnings, a.nvml_include,
                                 a.nccl_include)
    except GenError as e:
        print("thincuda_gen: error: %s" % e, file=sys.stderr)
        return 2
    for w in warnings:
        print("thincuda_gen: warning: %s" % w, file=sys.stderr)
    for p in problems:
        print("thincuda_gen: %s" % p, file=sys.stderr)
    if problems and not a.allow_problems:
        print("thincuda_gen: %d problem(s); fix gen/overrides.toml" % len(problems),
              file=sys.stderr)
        return 2
    if a.check:
        bad = 0
        for rel, text in sorted(files.items()):
            path = os.path.join(a.out, rel)
            old = open(path).read() if os.path.exists(path) else ""
            if old != text:
                bad += 1
                diff = difflib.unified_diff(old.splitlines(), text.splitlines(), path,
                                            "regenerated", lineterm="", n=1)
                print("\n".join(list(diff)[:40]))
        extra = sorted(set(os.listdir(a.out)) - set(files)) if os.path.isdir(a.out) else []
        for e in extra:
            if e.startswith("tc_"):
                bad += 1
                print("stale file in %s: %s" % (a.out, e))
        print("thincuda_gen: %s" % ("up to date" if not bad else "%d file(s) differ" % bad))
        return 1 if bad else 0
    old = {}
    for rel in files:
        path = os.path.join(a.out, rel)
        if os.path.exists(path):
            with open(path) as fh:
                old[rel] = fh.read()
    changes = api_changes(old, files)
    os.makedirs(a.out, exist_ok=True)
    for rel, text in sorted(files.items()):
        with open(os.path.join(a.out, rel), "w") as fh:
            fh.write(text)
    print("thincuda_gen: wrote %d files to %s" % (len(files), os.path.relpath(a.out)))
    if changes_empty(changes):
        print("thincuda_gen: no API difference against the generated/ it replaced")
    else:
        print(changes_console(changes))
        with open(os.path.join(a.out, "CHANGES.md"), "w") as fh:
            fh.write(changes_markdown(changes))
        print("thincuda_gen: the whole difference is in %s"
              % os.path.relpath(os.path.join(a.out, "CHANGES.md")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
