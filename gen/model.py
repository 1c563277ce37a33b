"""Builds a model of a C library header with libclang: functions, enums, macro aliases.

The model is what the templates render. Nothing here reads header text with regular
expressions: declarations, macro bodies and comments all come from clang.cindex cursors.
"""

import fnmatch
import glob
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field

import clang.cindex as ci

PARSE_OPTS = (ci.TranslationUnit.PARSE_DETAILED_PROCESSING_RECORD
              | ci.TranslationUnit.PARSE_SKIP_FUNCTION_BODIES)

INTEGER_KINDS = {
    ci.TypeKind.BOOL, ci.TypeKind.CHAR_U, ci.TypeKind.UCHAR, ci.TypeKind.CHAR16,
    ci.TypeKind.CHAR32, ci.TypeKind.USHORT, ci.TypeKind.UINT, ci.TypeKind.ULONG,
    ci.TypeKind.ULONGLONG, ci.TypeKind.CHAR_S, ci.TypeKind.SCHAR, ci.TypeKind.WCHAR,
    ci.TypeKind.SHORT, ci.TypeKind.INT, ci.TypeKind.LONG, ci.TypeKind.LONGLONG,
}
UNSIGNED_KINDS = {
    ci.TypeKind.BOOL, ci.TypeKind.CHAR_U, ci.TypeKind.UCHAR, ci.TypeKind.USHORT,
    ci.TypeKind.UINT, ci.TypeKind.ULONG, ci.TypeKind.ULONGLONG,
}
FLOAT_KINDS = {ci.TypeKind.FLOAT, ci.TypeKind.DOUBLE}
CHAR_KINDS = {ci.TypeKind.CHAR_S, ci.TypeKind.CHAR_U}  # plain char: text

VERSION_SUFFIX = re.compile(r"_v\d+$")
PT_MACROS = {"__CUDA_API_PTDS": "_ptds", "__CUDA_API_PTSZ": "_ptsz"}


class GenError(Exception):
    """A header could not be modelled; the message says which and why."""


def resource_include_dir():
    """Return the compiler's own include directory (stddef.h and friends) for libclang."""
    env = os.environ.get("THINCUDA_CLANG_RESOURCE_DIR")
    if env:
        return env
    clang = shutil.which("clang")
    if clang:
        out = subprocess.run([clang, "-print-resource-dir"], capture_output=True, text=True)
        cand = os.path.join(out.stdout.strip(), "include")
        if out.returncode == 0 and os.path.isfile(os.path.join(cand, "stddef.h")):
            return cand
    for cand in sorted(glob.glob("/usr/lib/llvm-*/lib/clang/*/include")):
        if os.path.isfile(os.path.join(cand, "stddef.h")):
            return cand
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc:
        out = subprocess.run([gcc, "-print-file-name=include"], capture_output=True, text=True)
        if out.returncode == 0:
            return out.stdout.strip()
    raise GenError("cannot find a compiler resource include directory (stddef.h); "
                   "set THINCUDA_CLANG_RESOURCE_DIR")


@dataclass
class Param:
    name: str
    type: str            # spelling as the header writes it, with our C names for C++ types
    decl: str            # full C declarator: type and name
    category: str        # int, uint, float, enum, pointer, handle, fnptr, record
    enum: str = ""       # enum type name when category == "enum"
    pointee: str = ""    # for pointers: int, uint, float, enum, pointer, record, void, char
    pointee_enum: str = ""
    pointee_const: bool = False
    direction: str = ""  # in, out, inout (pointers only)
    space: str = ""      # host, device (pointers only)
    nullable: bool = False
    source: str = ""     # why the class was chosen: const, doc, override


@dataclass
class Function:
    decl_name: str        # the name the header declares (cuMemAlloc_v2)
    name: str             # the name a C user writes (cuMemAlloc); wrapper is tc_ + name
    symbol: str           # what we look up: base name for the driver, decl name for dlsym
    ret_type: str
    ret_category: str     # status, void, value
    params: list
    doc: str
    deprecated: bool
    version: int = 0      # driver ABI version for cuGetProcAddress
    version_source: str = ""
    per_thread: str = ""  # "", "_ptds" or "_ptsz" for a per-thread-stream variant
    cxx_only: bool = False
    header: str = ""
    line: int = 0


@dataclass
class EnumConst:
    name: str
    value: int
    doc: str


@dataclass
class Enum:
    name: str             # typedef name, or "" when anonymous
    consts: list
    header: str


@dataclass
class Skip:
    name: str
    reason: str


@dataclass
class Library:
    key: str
    title: str
    headers: list
    status_type: str
    success: str
    functions: list = field(default_factory=list)
    enums: list = field(default_factory=list)
    skipped: list = field(default_factory=list)
    declared: int = 0
    version_macro: dict = field(default_factory=dict)
    sonames: list = field(default_factory=list)  # dlopen candidates; the driver's are fixed
    unclassified: list = field(default_factory=list)
    direct: bool = False  # the header defines the functions: called directly, not resolved


def _walk(cursor):
    for c in cursor.get_children():
        if c.kind == ci.CursorKind.LINKAGE_SPEC:
            yield from _walk(c)
        else:
            yield c


def _in_files(cursor, names):
    f = cursor.location.file
    return f is not None and os.path.basename(f.name) in names


def parse(path, include_dir, lang="c", defines=(), more_includes=(), all_comments=False):
    """Parse one header with libclang and return the translation unit; errors raise GenError.
    more_includes are searched after include_dir; all_comments takes plain /* */ comments as
    documentation too (nccl.h writes no doxygen)."""
    args = ["-x", lang, "-I", include_dir]
    for inc in more_includes:
        args += ["-I", inc]
    args += ["-isystem", resource_include_dir()]
    if lang == "c++":
        args.append("-std=c++17")
    if all_comments:
        args.append("-fparse-all-comments")
    args += ["-D" + d for d in defines]
    tu = ci.Index.create().parse(path, args=args, options=PARSE_OPTS)
    errs = [str(d) for d in tu.diagnostics if d.severity >= ci.Diagnostic.Error]
    if errs:
        raise GenError("libclang could not parse %s:\n  %s" % (path, "\n  ".join(errs[:10])))
    return tu


def macro_aliases(tu, files):
    """Map macro name -> (target identifier, per-thread suffix) for name-to-name macros."""
    out = {}
    for c in _walk(tu.cursor):
        if c.kind != ci.CursorKind.MACRO_DEFINITION or not _in_files(c, files):
            continue
        toks = [t.spelling for t in c.get_tokens()]
        if len(toks) == 2 and re.match(r"^[A-Za-z_]\w*$", toks[1]):
            out[toks[0]] = (toks[1], "")
        elif len(toks) == 5 and toks[1] in PT_MACROS and toks[2] == "(" and toks[4] == ")":
            out[toks[0]] = (toks[3], PT_MACROS[toks[1]])
    return out


def macro_int(tu, name):
    """Return the integer value of an object-like macro `name`, or None."""
    for c in _walk(tu.cursor):
        if c.kind == ci.CursorKind.MACRO_DEFINITION and c.spelling == name:
            toks = [t.spelling for t in c.get_tokens()][1:]
            if len(toks) == 1 and re.match(r"^\d+$", toks[0]):
                return int(toks[0])
            if len(toks) == 3 and toks[0] == "(" and re.match(r"^\d+$", toks[1]):
                return int(toks[1])
    return None


def clean_comment(raw):
    """Normalise a raw doc comment so that it can be re-emitted inside our header."""
    if not raw:
        return ""
    return "\n".join(line.rstrip() for line in raw.replace("\t", "    ").splitlines())


def _canon_category(t):
    """Classify a canonical type into the categories tracing and classification use."""
    c = t.get_canonical()
    k = c.kind
    if k in INTEGER_KINDS:
        return "uint" if k in UNSIGNED_KINDS else "int"
    if k in FLOAT_KINDS:
        return "float"
    if k == ci.TypeKind.ENUM:
        return "enum"
    if k == ci.TypeKind.POINTER:
        if c.get_pointee().kind in (ci.TypeKind.FUNCTIONPROTO, ci.TypeKind.FUNCTIONNOPROTO):
            return "fnptr"
        return "pointer"
    if k in (ci.TypeKind.RECORD, ci.TypeKind.ELABORATED):
        return "record"
    if k == ci.TypeKind.VOID:
        return "void"
    if k in (ci.TypeKind.CONSTANTARRAY, ci.TypeKind.INCOMPLETEARRAY):
        return "pointer"
    return "other"


def _enum_name(t):
    """Return the spelled (typedef) name of an enum type, without qualifiers."""
    return t.spelling.replace("const ", "").strip()


def declarator(type_spelling, name):
    """Combine a type spelling and a name into a C declarator (arrays, function pointers)."""
    if "(*)" in type_spelling:
        return type_spelling.replace("(*)", "(*%s)" % name, 1)
    m = re.match(r"^(.*?)\s*(\[.*\])$", type_spelling)
    if m:
        return "%s %s%s" % (m.group(1), name, m.group(2))
    if type_spelling.endswith("*"):
        return type_spelling + name
    return "%s %s" % (type_spelling, name)


def _param_docs(doc):
    """Return {param name: (tag, text)} from \\param lines of a doxygen comment."""
    out = {}
    for line in doc.splitlines():
        line = line.strip().lstrip("*").strip()
        m = re.match(r"^[\\@]param\s*(\[[a-z, ]+\])?\s+(\w+)\s*-?\s*(.*)$", line)
        if m:
            out[m.group(2)] = ((m.group(1) or "").strip("[]").replace(" ", ""), m.group(3))
    return out


# Phrases of the driver's \\param descriptions, checked in order against the lower-cased
# first sentence. They cover how cuda.h words its outputs and inputs; gen/overrides.toml
# settles the parameters whose words say neither.
DOC_PHRASES = [
    ("inout", r"^see description|auto-advancing iterator|value to swap"),
    ("out", r"^returned|^returns? |^output|^optionally returns|^on success, this will"
            r"|(pointer|location|array|address) (used )?to (return|store|receive)"
            r"|optional (location|pointer|array|parameter) to (return|store|receive)"
            r"|in which .* (is|are) returned|^location to|^retrieved value"
            r"|memory location where the result|to return$|returned\b"),
    ("in", r"^array of|^(an|a) array of|^options?\b|^option values|^list of|^host pointer"
           r"|^parameters|^pointer to arbitrary|data to be passed|^starting address"
           r"|^pointer to memory to free|^the input data|user data|^specification"
           r"|^instantiation parameters|^updated parameters|creation parameters"
           r"|value to set|^resources to|^the set of|^the types and parameters"
           r"|^optional \w+ operation arguments|^rgba color"),
]


def _doc_direction(tag, text, name):
    if tag == "out":
        return "out"
    if tag in ("in,out", "inout", "out,in"):
        return "inout"
    if tag == "in":
        return "in"
    if name.endswith("_out"):
        return "out"
    low = text.lower().strip()
    for direction, pattern in DOC_PHRASES:
        if re.search(pattern, low):
            return direction
    return ""


def glob_match(name, pattern):
    """fnmatch with shell brace alternatives: "{x,y}" matches x or y."""
    m = re.search(r"\{([^{}]*)\}", pattern)
    if not m:
        return fnmatch.fnmatchcase(name, pattern)
    return any(glob_match(name, pattern[:m.start()] + alt + pattern[m.end():])
               for alt in m.group(1).split(","))


class Overrides:
    """Pointer classes and status strings from gen/overrides.toml (first match wins)."""

    def __init__(self, data):
        self.pointer_rules = data.get("pointer", [])
        self.status_strings = data.get("status_string", {})
        self.skip_functions = {s["function"]: s["reason"] for s in data.get("skip", [])}
        self.not_status = set(data.get("not_status", {}).get("names", []))
        self.used = set()

    def skip_reason(self, func):
        """The reason a [[skip]] rule (its function a shell-style glob) gives, or None."""
        for pattern, reason in self.skip_functions.items():
            if glob_match(func, pattern):
                return reason
        return None

    def pointer(self, lib, func, param, ptype):
        for i, rule in enumerate(self.pointer_rules):
            if rule.get("library", lib) != lib:
                continue
            if not glob_match(func, rule.get("function", "*")):
                continue
            if not glob_match(param, rule.get("param", "*")):
                continue
            if "type" in rule and not glob_match(ptype, rule["type"]):
                continue
            self.used.add(i)
            return rule
        return None


CXX_TYPE_MAP = [("__nv_bfloat16", "tc_bf16"), ("__half", "tc_half")]


def _c_type(spelling):
    for cxx, c in CXX_TYPE_MAP:
        spelling = re.sub(r"\b%s\b" % cxx, c, spelling)
    return spelling


def _make_param(lib, fname, arg, index, docs, overrides, default_space):
    t = arg.type
    name = arg.spelling or "arg%d" % index
    spelling = _c_type(t.spelling)
    p = Param(name=name, type=spelling, decl=declarator(spelling, name),
              category=_canon_category(t))
    if p.category == "enum":
        p.enum = _enum_name(t)
    if p.category == "pointer" and "*" not in spelling and "[" not in spelling:
        p.category = "handle"   # an opaque handle typedef (CUcontext) passed by value
    if p.category != "pointer":
        return p
    canon = t.get_canonical()
    pointee = (canon.get_pointee() if canon.kind == ci.TypeKind.POINTER
               else canon.get_array_element_type())
    # libclang drops the qualifier of an array parameter's element ("const float *const[]"),
    # so for arrays the leading const of the spelling decides.
    p.pointee_const = (pointee.is_const_qualified() if canon.kind == ci.TypeKind.POINTER
                       else spelling.lstrip().startswith("const "))
    pk = pointee.get_canonical().kind
    if pk in CHAR_KINDS:
        p.pointee = "char"
    else:
        p.pointee = _canon_category(pointee)
    if p.pointee == "enum":
        p.pointee_enum = _enum_name(pointee)
    rule = overrides.pointer(lib, fname, name, spelling)
    tag, text = docs.get(name, ("", ""))
    doc_dir = _doc_direction(tag, text, name)
    if p.pointee_const:
        p.direction, p.source = "in", "const"
    elif rule is not None and rule.get("force"):
        p.direction, p.source = rule["class"], "override"
    elif lib in VERSIONED_STRUCT_LIBS and _has_version_field(pointee):
        p.direction, p.source = "inout", "version field"
    elif doc_dir:
        p.direction, p.source = doc_dir, "doc"
    elif rule is not None and "class" in rule:
        p.direction, p.source = rule["class"], "override"
    p.space = (rule or {}).get("space", default_space)
    p.nullable = bool((rule or {}).get("nullable", False))
    if not p.nullable and re.search(r"\b(may|can) be (::)?NULL\b|\bor (::)?NULL\b", text):
        p.nullable = True
    return p


# Libraries whose structs that start with a `version` member are read and written: the caller
# sets the version (NVML's nvmlMemory_v2_t and kin) and the library fills in the rest.
VERSIONED_STRUCT_LIBS = {"nvml"}


def _has_version_field(t):
    decl = t.get_canonical().get_declaration()
    if decl.kind not in (ci.CursorKind.STRUCT_DECL, ci.CursorKind.UNION_DECL):
        return False
    fields = [c.spelling for c in decl.get_children() if c.kind == ci.CursorKind.FIELD_DECL]
    return fields[:1] == ["version"]


def _is_deprecated(cursor):
    if cursor.availability == ci.AvailabilityKind.DEPRECATED:
        return True
    return any(c.kind == ci.CursorKind.UNEXPOSED_ATTR and "deprecated" in
               " ".join(t.spelling for t in c.get_tokens()) for c in cursor.get_children())


def function_decls(tu, files):
    """Return the function declarations of `files` in `tu`, keyed by declared name."""
    out = {}
    for c in _walk(tu.cursor):
        if c.kind == ci.CursorKind.FUNCTION_DECL and _in_files(c, files):
            out.setdefault(c.spelling, c)
    return out


def enums(tu, files, header):
    """Return every enum (named through a typedef or anonymous) declared in `files`."""
    result, seen = [], set()
    typedef_of = {}
    for c in _walk(tu.cursor):
        if c.kind == ci.CursorKind.TYPEDEF_DECL and _in_files(c, files):
            u = c.underlying_typedef_type.get_canonical()
            if u.kind == ci.TypeKind.ENUM:
                typedef_of.setdefault(u.get_declaration().hash, c.spelling)
    for c in _walk(tu.cursor):
        if c.kind != ci.CursorKind.ENUM_DECL or not _in_files(c, files):
            continue
        if not c.is_definition() or c.hash in seen:
            continue
        seen.add(c.hash)
        name = typedef_of.get(c.hash) or ("" if c.is_anonymous() else c.spelling)
        consts = [EnumConst(k.spelling, k.enum_value, clean_comment(k.raw_comment))
                  for k in c.get_children() if k.kind == ci.CursorKind.ENUM_CONSTANT_DECL]
        result.append(Enum(name=name, consts=consts, header=header))
    return result


def build_function(lib, decl_name, name, cursor, overrides, default_space, header,
                   doc_comment=None):
    """Model one function; doc_comment, when given, is its documentation comment where the
    header puts it elsewhere (nvJitLink.h documents the static inline wrapper instead of the
    exported symbol)."""
    doc = clean_comment(doc_comment or cursor.raw_comment)
    docs = _param_docs(doc)
    params = [_make_param(lib, name, a, i, docs, overrides, default_space)
              for i, a in enumerate(cursor.get_arguments())]
    rt = cursor.result_type
    ret_type = _c_type(rt.spelling)
    return Function(decl_name=decl_name, name=name, symbol=decl_name, ret_type=ret_type,
                    ret_category="", params=params, doc=doc,
                    deprecated=_is_deprecated(cursor), header=header,
                    line=cursor.location.line)


def public_names(decls, aliases):
    """Map declared name -> sorted list of (public name, per-thread suffix).

    A name a C user writes is either a macro that resolves to a declaration
    (`#define cuMemAlloc cuMemAlloc_v2`, `__CUDA_API_PTDS(...)`) or the declared name
    itself when no macro targets it or it carries no `_vN` version suffix.
    """
    def resolve(name, depth=0):
        if name in aliases and depth < 8:
            target, pt = aliases[name]
            if target == name:
                return (name, pt) if name in decls else (None, "")
            found, pt2 = resolve(target, depth + 1)
            return found, pt or pt2
        if name in decls:
            return name, ""
        return None, ""

    targets = {}
    for macro in aliases:
        found, pt = resolve(macro)
        # `#define cuEventRecord __CUDA_API_PTSZ(cuEventRecord)` names itself, and matters
        # only for the per-thread variant it announces.
        if found is not None and (found != macro or pt):
            targets.setdefault(found, []).append((macro, pt))
    out = {}
    for d in decls:
        names = list(targets.get(d, []))
        if not names or not VERSION_SUFFIX.search(d):
            if d not in [n for n, _ in names]:
                names.append((d, ""))
        out[d] = sorted(set(names))
    return out
