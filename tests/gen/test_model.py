"""Generator unit tests on tests/gen/fixture/mini.h: aliases, versioned names, per-thread
variants, out-parameters, function pointers, structs by value, anonymous enums, deprecation."""
import os

import pytest

import model

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "fixture")


@pytest.fixture(scope="module")
def tu():
    return model.parse(os.path.join(FIX, "mini.h"), FIX)


@pytest.fixture(scope="module")
def funcs(tu):
    decls = model.function_decls(tu, {"mini.h"})
    names = model.public_names(decls, model.macro_aliases(tu, {"mini.h"}))
    ov = model.Overrides({})
    out = {}
    for d, cur in decls.items():
        for n, pt in names[d]:
            out[n] = model.build_function("mini", d, n, cur, ov, "host", "mini.h")
            out[n].pt = pt
    return out


def test_macro_aliases_give_the_public_name(funcs):
    assert funcs["miniAlloc"].decl_name == "miniAlloc_v2"
    assert "miniAlloc_v2" not in funcs
    assert funcs["miniCopy"].decl_name == "miniCopy_v2"
    assert funcs["miniCopy"].pt == "_ptds"
    assert funcs["miniQuery"].decl_name == "miniQuery"


def test_pointer_classes_come_from_docs_and_const(funcs):
    ptr, = [p for p in funcs["miniAlloc"].params if p.name == "ptr"]
    assert (ptr.direction, ptr.source, ptr.pointee) == ("out", "doc", "pointer")
    q = {p.name: p for p in funcs["miniQuery"].params}
    assert q["count"].direction == "out" and q["count"].pointee == "int"
    assert q["cursor"].direction == "inout" and q["cursor"].pointee == "uint"
    assert q["name"].direction == "in" and q["name"].pointee == "char"
    c = {p.name: p for p in funcs["miniCopy"].params}
    assert c["src"].direction == "in" and c["dst"].direction == ""


def test_function_pointers_handles_and_structs(funcs):
    p = {p.name: p for p in funcs["miniOnEvent"].params}
    assert p["ctx"].category == "handle"
    assert p["cb"].category == "fnptr" and p["cb"].decl == "miniCallback cb"
    assert p["raw"].category == "fnptr" and p["raw"].decl == "void (*raw)(int)"
    assert p["id"].category == "record"


def test_arrays_and_enums(funcs):
    p = {p.name: p for p in funcs["miniDims"].params}
    assert p["dims"].decl == "const int dims[3]" and p["dims"].direction == "in"
    assert p["kind"].category == "enum" and p["kind"].enum == "miniKind"


def test_deprecated_is_kept(funcs):
    assert funcs["miniOld"].deprecated
    assert not funcs["miniQuery"].deprecated


def test_enums_named_and_anonymous(tu):
    es = model.enums(tu, {"mini.h"}, "mini.h")
    named = [e for e in es if e.name == "miniKind"][0]
    assert [(k.name, k.value) for k in named.consts] == [("MINI_KIND_A", 0), ("MINI_KIND_B", 7)]
    assert "first kind" in named.consts[0].doc
    anon = [e for e in es if e.name == ""]
    assert anon and anon[0].consts[1].name == "MINI_ANON_Y"


def test_override_rules_glob_with_braces():
    assert model.glob_match("cublasSgemm", "cublas{S,D}gemm")
    assert not model.glob_match("cublasCgemm", "cublas{S,D}gemm")
    ov = model.Overrides({"pointer": [{"function": "mini*", "param": "{a,b}", "class": "out"}]})
    assert ov.pointer("x", "miniF", "b", "int *")["class"] == "out"
    assert ov.pointer("x", "miniF", "c", "int *") is None
