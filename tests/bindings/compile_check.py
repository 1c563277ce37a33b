#!/usr/bin/env python3
"""Negative compile test: wrong arguments to generated functions must not compile.

Usage: compile_check.py SOURCE -- COMPILER [FLAGS...]
SOURCE lists its variants in comment lines "variant N: what is wrong". Variant 0 (the correct
calls) must compile; every listed variant must fail with an error diagnostic.
"""
import re
import subprocess
import sys
import tempfile


def compile_variant(src, cmd, v):
    with tempfile.NamedTemporaryFile(suffix=".o") as obj:
        r = subprocess.run(cmd + ["-DVARIANT=%d" % v, "-c", src, "-o", obj.name],
                           capture_output=True, text=True)
    return r.returncode, r.stderr


def main():
    sep = sys.argv.index("--")
    src, cmd = sys.argv[1], sys.argv[sep + 1:]
    VARIANTS = {int(m.group(1)): m.group(2).replace("*/", "").strip() for m in
                re.finditer(r"variant (\d+): (.*)", open(src).read())}
    if not VARIANTS:
        print("FAIL: %s lists no variants" % src)
        return 1
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
