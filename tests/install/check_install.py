#!/usr/bin/env python3
"""Install the build into a temporary prefix, then use it as another project would: every
installed header compiles on its own, the shared library exports exactly what the headers
declare and needs only libc, libdl, pthreads and libm, and every example builds with
`pkg-config --cflags --libs thincuda` against the shared and the static library and runs
(without a driver it must fail cleanly, naming the reason); an example with its own kernels
(X.cu beside X.c) gets its launchers from the installed generator, and a mistyped launch
must not compile; every C snippet in README.md and docs/ compiles against the installed headers.

Usage: check_install.py BUILD_DIR SOURCE_DIR DEFAULT_LIBRARY [CC ...]
"""
import glob
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

SRC = sys.argv[2]
sys.path.insert(0, os.path.join(SRC, "gen"))

import clang.cindex as ci  # noqa: E402
from model import resource_include_dir  # noqa: E402

# Loader symbols that every shared object defines.
LINKER_SYMBOLS = {"_init", "_fini", "__bss_start", "_edata", "_end"}
ALLOWED_NEEDED = re.compile(r"^(libc|libdl|libpthread|libm|ld-linux[-\w]*|libasan|libubsan)\.so")
NO_DRIVER = {"THINCUDA_LIBCUDA": "/nonexistent/libcuda.so.1",
             "THINCUDA_LIBCUBLAS": "/nonexistent/libcublas.so"}


def run(cmd, env=None, check=True):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if check and r.returncode != 0:
        sys.exit("failed: %s\n%s%s" % (shlex.join(cmd), r.stdout, r.stderr))
    return r


def pkg_config(pc_dir, prefix, *args):
    env = dict(os.environ, PKG_CONFIG_PATH=pc_dir)
    out = run(["pkg-config", "--define-variable=prefix=" + prefix] + list(args) + ["thincuda"],
              env=env)
    return shlex.split(out.stdout)


def declared_api(include_dir, cflags):
    """Every function and variable with external linkage that the installed headers declare."""
    args = ["-x", "c", "-std=c11", "-isystem", resource_include_dir()] + cflags
    tu = ci.Index.create().parse(os.path.join(include_dir, "thincuda.h"), args=args)
    errs = [str(d) for d in tu.diagnostics if d.severity >= ci.Diagnostic.Error]
    if errs:
        sys.exit("thincuda.h does not parse:\n" + "\n".join(errs[:10]))
    names = set()
    for c in tu.cursor.walk_preorder():
        if c.kind not in (ci.CursorKind.FUNCTION_DECL, ci.CursorKind.VAR_DECL):
            continue
        f = c.location.file
        if f is None or not os.path.realpath(f.name).startswith(os.path.realpath(include_dir)):
            continue
        if c.linkage == ci.LinkageKind.EXTERNAL and c.semantic_parent.kind == ci.CursorKind.TRANSLATION_UNIT:
            names.add(c.spelling)
    return names


def exported(lib):
    out = run(["nm", "-D", "--defined-only", lib]).stdout
    return {line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()} - LINKER_SYMBOLS


def needed(path):
    out = run(["readelf", "-d", path]).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


def user_kernels(cu, generator, out, compile_cmd, failures):
    """Launchers (and, where nvcc is found, the fatbin) for an example's own kernels through
    the installed generator; check that a mistyped launch does not compile. Return the extra
    compiler arguments."""
    os.makedirs(out)
    nvcc = shutil.which("nvcc") or os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"),
                                                "bin", "nvcc")
    image = []
    if os.access(nvcc, os.X_OK):
        fatbin = os.path.join(out, "kernels.fatbin")
        run([nvcc, "-fatbin", "-arch=sm_80", "-o", fatbin, cu])
        image = ["--image", fatbin, "--targets", "sm_80 compute_80"]
    run([sys.executable, generator, "kernels", "--prefix", "ex_", "--out", out] + image + [cu])
    wrong = ('#include "ex_kernels.h"\nvoid f(tc_kmodule *m, tc_launch_config c, float *y)\n'
             '{ ex_launch_saxpy(m, c, (size_t)1, 2.0, y, y); }\n')
    r = subprocess.run(compile_cmd + ["-std=c11", "-fsyntax-only", "-I", out, "-x", "c", "-"],
                       input=wrong, capture_output=True, text=True)
    if r.returncode == 0:
        failures.append("a mistyped ex_launch_saxpy call compiled")
    return ["-I", out, os.path.join(out, "ex_kernels.c")]


def main():
    build, default_library, cc = sys.argv[1], sys.argv[3], sys.argv[4:] or ["cc"]
    shared = default_library in ("shared", "both")
    static = default_library in ("static", "both")
    failures = []
    with tempfile.TemporaryDirectory() as dest:
        run(["meson", "install", "-C", build, "--no-rebuild", "--quiet", "--destdir", dest])
        pcs = glob.glob(os.path.join(dest, "**", "pkgconfig", "thincuda.pc"), recursive=True)
        if len(pcs) != 1:
            sys.exit("expected one installed thincuda.pc, found %s" % pcs)
        pc = pcs[0]
        prefix = re.search(r"^prefix=(.*)$", open(pc).read(), re.M).group(1)
        root = dest + prefix
        pc_dir = os.path.dirname(pc)
        libdir = os.path.dirname(pc_dir)
        include_dir = os.path.join(root, "include", "thincuda")
        cflags = pkg_config(pc_dir, root, "--cflags")
        assert "-I" + include_dir in cflags, cflags

        internal = [h for h in ("runtime/internal.h", "runtime/map.h", "ops/internal.h",
                                "tc_internal.h") if os.path.exists(os.path.join(include_dir, h))]
        if internal:
            failures.append("internal headers installed: %s" % internal)
        headers = sorted(os.path.relpath(h, include_dir)
                         for h in glob.glob(os.path.join(include_dir, "**", "*.h"), recursive=True))
        for h in headers:
            src = '#include "%s"\n#include "%s"\n' % (h, h)
            r = subprocess.run(cc + ["-std=c11", "-Wall", "-Wextra", "-Werror", "-fsyntax-only",
                                     "-x", "c", "-"] + cflags, input=src, capture_output=True,
                               text=True)
            if r.returncode != 0:
                failures.append("%s does not compile on its own (twice):\n%s" % (h, r.stderr[-1500:]))

        sos = glob.glob(os.path.join(libdir, "libthincuda.so.*.*.*"))
        if shared:
            if len(sos) != 1:
                sys.exit("expected one libthincuda.so.X.Y.Z in %s, found %s" % (libdir, sos))
            api, exp = declared_api(include_dir, cflags), exported(sos[0])
            if api - exp:
                failures.append("declared in the headers but not exported: %s" % sorted(api - exp))
            if exp - api:
                failures.append("exported but not declared in the headers: %s" % sorted(exp - api)[:50])
            bad = [n for n in needed(sos[0]) if not ALLOWED_NEEDED.match(n)]
            if bad:
                failures.append("libthincuda.so needs more than libc, libdl, pthreads and libm: %s" % bad)
            print("shared library: %d symbols exported, %d declared in the headers" % (len(exp), len(api)))

        libs = pkg_config(pc_dir, root, "--libs")
        static_libs = [os.path.join(libdir, "libthincuda.a") if f == "-lthincuda" else f
                       for f in pkg_config(pc_dir, root, "--libs", "--static")]
        version = re.search(r'#define TC_VERSION_STRING "([^"]+)"',
                            open(os.path.join(include_dir, "runtime", "version.h")).read()).group(1)
        examples = sorted(glob.glob(os.path.join(SRC, "examples", "*.c")))
        env = dict(os.environ, LD_LIBRARY_PATH=libdir, **NO_DRIVER)
        generator = pkg_config(pc_dir, root, "--variable=generator")[0]
        for ex in examples:
            name = os.path.basename(ex)[:-2]
            extra = []
            if os.path.exists(ex[:-2] + ".cu"):
                extra = user_kernels(ex[:-2] + ".cu", generator, os.path.join(dest, name),
                                     cc + cflags, failures)
            for kind, flags, ok in (("shared", libs, shared), ("static", static_libs, static)):
                if not ok:
                    continue
                exe = os.path.join(dest, "%s_%s" % (name, kind))
                r = subprocess.run(cc + ["-std=c11", "-Wall", "-Wextra", "-Werror", ex, "-o", exe]
                                   + extra + cflags + flags, capture_output=True, text=True)
                if r.returncode != 0:
                    failures.append("examples/%s.c (%s) does not build:\n%s" % (name, kind, r.stderr[-2000:]))
                    continue
                links = any(n.startswith("libthincuda.so") for n in needed(exe))
                if links != (kind == "shared"):
                    failures.append("%s_%s: NEEDED %s" % (name, kind, needed(exe)))
                r = subprocess.run([exe], capture_output=True, text=True, env=env, timeout=60)
                if name == "hello" and "thincuda %s (headers %s)" % (version, version) not in r.stdout:
                    failures.append("hello_%s: no version line %s in %r" % (kind, version, r.stdout))
                if r.returncode != 1 or "libcuda" not in r.stderr:
                    failures.append("%s_%s without a driver: exit %d, stderr %r" % (
                        name, kind, r.returncode, r.stderr[-400:]))
        docs = ["README.md"] + sorted(os.path.join("docs", f) for f in os.listdir(os.path.join(SRC, "docs"))
                                      if f.endswith(".md"))
        snippets = [t for d in docs for t in re.findall(r"```c\n(.*?)```", open(os.path.join(SRC, d)).read(), re.S)]
        for i, text in enumerate(snippets):
            r = subprocess.run(cc + ["-std=c11", "-Wall", "-Wextra", "-Werror", "-c", "-x", "c", "-",
                                     "-o", os.path.join(dest, "snippet%d.o" % i)] + cflags,
                               input=text, capture_output=True, text=True)
            if r.returncode != 0:
                failures.append("C snippet %d of README.md and docs/ does not compile:\n%s%s" % (
                    i + 1, text, r.stderr[-1500:]))
        print("README.md and docs/: %d C snippets compile against the installed headers" % len(snippets))
        print("examples: %s built (%s) and run without a driver" % (
            ", ".join(os.path.basename(e)[:-2] for e in examples),
            " and ".join(k for k, ok in (("shared", shared), ("static", static)) if ok)))
    for f in failures:
        print("FAIL: " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
