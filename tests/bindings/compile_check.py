#!/usr/bin/env python3
"""Negative compile test: wrong argument types to generated wrappers must not compile.

Usage: compile_check.py SOURCE -- COMPILER [FLAGS...]
Variant 0 (correct calls) must compile; variants 1.. must each fail with a diagnostic.
"""
import subprocess
import sys
import tempfile

VARIANTS = {1: "int * for CUdeviceptr *", 2: "curandGenerator_t for cublasHandle_t",
            3: "too few arguments", 4: "float for const float *"}


def compile_variant(src, cmd, v):
    with tempfile.NamedTemporaryFile(suffix=".o") as obj:
        r = subprocess.run(cmd + ["-DVARIANT=%d" % v, "-c", src, "-o", obj.name],
                           capture_output=True, text=True)
    return r.returncode, r.stderr


def main():
    sep = sys.argv.index("--")
    src, cmd = sys.argv[1], sys.argv[sep + 1:]
    failed = 0
    rc, err = compile_variant(src, cmd, 0)
    if rc != 0:
        print("FAIL: the correct variant does not compile:\n" + err)
        return 1
    print("ok: correct calls compile")
    for v, what in VARIANTS.items():
        rc, err = compile_variant(src, cmd, v)
        if rc == 0:
            print("FAIL: variant %d (%s) compiled" % (v, what))
            failed += 1
        elif "error" not in err:
            print("FAIL: variant %d (%s) failed without an error diagnostic:\n%s" % (v, what, err))
            failed += 1
        else:
            first = next(l for l in err.splitlines() if "error" in l)
            print("ok: variant %d (%s) rejected: %s" % (v, what, first.split("error:")[-1].strip()))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
