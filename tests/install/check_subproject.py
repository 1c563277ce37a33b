#!/usr/bin/env python3
"""Build examples/ as a project of its own with thincuda as its meson subproject: it gets
dependency('thincuda') and builds the library only (no binary, tools or tests), and the
examples run (without a driver they must fail cleanly, naming the reason).

Usage: check_subproject.py SOURCE_DIR
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        sys.exit("failed: %s\n%s%s" % (" ".join(cmd), r.stdout[-3000:], r.stderr[-3000:]))
    return r


def main():
    src = os.path.realpath(sys.argv[1])
    with tempfile.TemporaryDirectory() as tmp:
        proj = os.path.join(tmp, "examples")
        shutil.copytree(os.path.join(src, "examples"), proj)
        os.makedirs(os.path.join(proj, "subprojects"))
        os.symlink(src, os.path.join(proj, "subprojects", "thincuda"))
        build = os.path.join(tmp, "build")
        run(["meson", "setup", build, proj, "--force-fallback-for=thincuda",
             "-Dthincuda:kernels=disabled", "-Dthincuda:tests=disabled"])
        run(["ninja", "-C", build])
        targets = json.loads(run(["meson", "introspect", build, "--targets"]).stdout)
        sub = [t for t in targets if t["subproject"] == "thincuda"]
        extra = ["%s (%s)" % (t["name"], t["type"]) for t in sub
                 if t["type"] not in ("static library", "shared library", "custom")]
        if extra:
            sys.exit("the subproject built more than the library: %s" % extra)
        env = dict(os.environ, THINCUDA_LIBCUDA="/nonexistent/libcuda.so.1")
        for t in targets:
            if t["subproject"] is None and t["type"] == "executable":
                exe = t["filename"][0]
                r = subprocess.run([exe], capture_output=True, text=True, env=env, timeout=60)
                if r.returncode != 1 or "libcuda" not in r.stderr:
                    sys.exit("%s without a driver: exit %d, %r" % (t["name"], r.returncode, r.stderr))
        print("subproject: targets %s; examples built and run" % ", ".join(sorted(t["name"] for t in sub)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
