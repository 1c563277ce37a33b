"""Read the `extern "C" __global__` kernels in kernels/*.cu for the launcher generator.

libclang parses each file as CUDA (host side only, function bodies skipped) with
gen/kernel_prelude/ standing in for the CUDA headers, so only declarations matter.
"""

import glob
import os
from dataclasses import dataclass, field

import clang.cindex as ci

from model import GenError, resource_include_dir

HERE = os.path.dirname(os.path.abspath(__file__))
PRELUDE = os.path.join(HERE, "kernel_prelude")

# CUDA-side scalar types a kernel parameter may use, and their C spelling.
SCALARS = {
    "char": "char", "signed char": "signed char", "unsigned char": "unsigned char",
    "short": "short", "unsigned short": "unsigned short", "int": "int",
    "unsigned int": "unsigned int", "long": "long", "unsigned long": "unsigned long",
    "long long": "long long", "unsigned long long": "unsigned long long",
    "float": "float", "double": "double", "bool": "bool", "void": "void",
    "__half": "tc_half", "__nv_bfloat16": "tc_bf16", "__half2": "tc_half2",
    "__nv_bfloat162": "tc_bf162",
}
# Typedefs kept by name because C has the same ones (<stdint.h>, <stddef.h>).
TYPEDEFS = {"int8_t", "int16_t", "int32_t", "int64_t", "uint8_t", "uint16_t", "uint32_t",
            "uint64_t", "size_t", "ptrdiff_t", "half"}


@dataclass
class KParam:
    name: str
    c_type: str          # as the C launcher declares it
    size: int            # bytes, as the CUDA compiler lays it out
    align: int
    pointer: bool
    const_pointee: bool  # pointer to const: the launcher also accepts the non-const pointer


@dataclass
class Kernel:
    name: str            # tc_k_<op>_<dtype>
    short: str           # <op>_<dtype>: the launcher is tc_launch_<short>
    file: str            # kernels/<file>.cu
    line: int
    params: list = field(default_factory=list)
    doc: str = ""


def _c_base(t, where):
    """C spelling of a non-pointer CUDA type (without qualifiers)."""
    decl = t.spelling
    for q in ("const ", "volatile "):
        decl = decl.replace(q, "")
    decl = decl.replace("__restrict", "").strip()
    if decl in TYPEDEFS:
        return "tc_half" if decl == "half" else decl
    canon = t.get_canonical().spelling
    for q in ("const ", "volatile "):
        canon = canon.replace(q, "")
    canon = canon.replace("struct ", "").strip()
    if canon in SCALARS:
        return SCALARS[canon]
    if canon == "CUtensorMap_st":
        return "CUtensorMap"
    raise GenError("%s: type '%s' cannot cross into C; use a scalar, a 16-bit float type, a "
                   "CUtensorMap or a pointer to one" % (where, t.spelling))


def _param(arg, where):
    t = arg.type
    if t.kind in (ci.TypeKind.LVALUEREFERENCE, ci.TypeKind.RVALUEREFERENCE):
        raise GenError("%s: reference parameters cannot be passed to a kernel from C" % where)
    if t.kind == ci.TypeKind.POINTER:
        pt = t.get_pointee()
        if pt.kind == ci.TypeKind.POINTER:
            raise GenError("%s: pointer-to-pointer parameters are not supported" % where)
        base = _c_base(pt, where)
        const = pt.is_const_qualified()
        c_type = ("const " if const else "") + base + " *"
        return KParam(arg.spelling, c_type, t.get_size(), t.get_align(), True, const)
    base = _c_base(t, where)
    if base == "void":
        raise GenError("%s: void parameter" % where)
    if base == "CUtensorMap":
        # The tensor memory accelerator reads a map passed by value from the parameter space:
        # without __grid_constant__ the compiler may copy it to local memory, where it may not.
        grid_constant = any(c.kind == ci.CursorKind.ANNOTATE_ATTR and c.spelling == "tc_grid_constant"
                            for c in arg.get_children())
        if not (grid_constant and t.is_const_qualified()):
            raise GenError("%s: a CUtensorMap passed by value must be declared const "
                           "__grid_constant__" % where)
    return KParam(arg.spelling, base, t.get_size(), t.get_align(), False, False)


def _doc(cursor):
    raw = cursor.raw_comment or ""
    lines = []
    for l in raw.splitlines():
        l = l.strip()
        for p in ("/**", "/*", "*/", "///", "//", "*"):
            if l.startswith(p):
                l = l[len(p):].strip()
        if l.endswith("*/"):
            l = l[:-2].strip()
        if l:
            lines.append(l)
    return " ".join(lines)


def read_file(path, root, prefix="tc_k_"):
    """Return the extern "C" __global__ kernels declared in one .cu file, in source order.
    thincuda's own kernels are named `prefix`<op>_<dtype>; prefix None takes any name."""
    args = ["-x", "cuda", "--cuda-host-only", "-nocudainc", "-nocudalib", "-std=c++17",
            "-isystem", PRELUDE, "-isystem", resource_include_dir(),
            "-include", os.path.join(PRELUDE, "thincuda_prelude.h"),
            "-I", os.path.dirname(path)]
    opts = ci.TranslationUnit.PARSE_SKIP_FUNCTION_BODIES
    tu = ci.Index.create().parse(path, args=args, options=opts)
    errs = [str(d) for d in tu.diagnostics if d.severity >= ci.Diagnostic.Error]
    if errs:
        raise GenError("libclang could not read %s:\n  %s" % (path, "\n  ".join(errs[:10])))
    rel = os.path.relpath(path, root)
    found = []
    for c in tu.cursor.walk_preorder():
        if c.kind != ci.CursorKind.FUNCTION_DECL or c.location.file is None:
            continue
        if os.path.realpath(c.location.file.name) != os.path.realpath(path):
            continue
        if not any(a.kind == ci.CursorKind.CUDAGLOBAL_ATTR for a in c.get_children()):
            continue
        where = "%s:%d: %s" % (rel, c.location.line, c.spelling)
        if c.semantic_parent.kind != ci.CursorKind.LINKAGE_SPEC:
            raise GenError("%s: a __global__ kernel must be declared extern \"C\"" % where)
        if prefix and not c.spelling.startswith(prefix):
            raise GenError("%s: kernel names start with %s (%s<op>_<dtype>)"
                           % (where, prefix, prefix))
        if c.is_definition() or not any(k.name == c.spelling for k in found):
            short = c.spelling[len(prefix):] if prefix else c.spelling
            k = Kernel(c.spelling, short, rel, c.location.line, doc=_doc(c))
            for i, a in enumerate(c.get_arguments()):
                k.params.append(_param(a, "%s parameter %d (%s)" % (where, i + 1, a.spelling)))
            found = [f for f in found if f.name != k.name] + [k]
    return found


def read_all(kernels_dir):
    """Return every kernel in kernels_dir/*.cu, sorted by file then line; names must be unique."""
    root = os.path.dirname(os.path.abspath(kernels_dir))
    out = []
    for path in sorted(glob.glob(os.path.join(kernels_dir, "*.cu"))):
        out += read_file(path, root)
    seen = {}
    for k in out:
        if k.name in seen:
            raise GenError("kernel %s is defined in both %s and %s" % (k.name, seen[k.name], k.file))
        seen[k.name] = k.file
    return out
