#!/usr/bin/env python3
"""Embed nvcc's fatbins in C: each part's image, size and the kernel files it holds, and the
parts' targets in one line.

Usage: embed.py OUTPUT.c [--part FATBIN TARGETS FILES]...
FILES names the kernels/ files a part holds, comma-separated; empty: every file no other part
names. With no part (a build without nvcc) there are no images and the size is 0.
"""
import argparse

ap = argparse.ArgumentParser()
ap.add_argument("output")
ap.add_argument("--part", nargs=3, action="append", default=[], metavar=("FATBIN", "TARGETS", "FILES"))
a = ap.parse_args()


def c_string(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


hidden = '__attribute__((visibility("hidden")))'
lines = ["/* Written by tools/build/embed.py at build time from nvcc's fatbins. */",
         "#include <stddef.h>", "#include \"runtime/internal.h\"", ""]
sizes = []
for i, (path, _, _) in enumerate(a.part):
    data = open(path, "rb").read()
    sizes.append(len(data))
    lines.append("/* 8-byte aligned: the driver reads the fatbin header in place. */")
    lines.append("__attribute__((aligned(8))) static const unsigned char part%d[%d] = {"
                 % (i, max(len(data), 1)))
    for j in range(0, len(data), 24):
        lines.append("    " + ",".join(str(b) for b in data[j:j + 24]) + ",")
    lines.append("};")
n = len(a.part)
if n:
    summary = "; ".join(t if not f else "%s: %s" % (f.replace(",", ", "), t) for _, t, f in a.part)
else:
    summary = "none (built without nvcc)"


def table(ctype, name, items):
    body = ", ".join(items) if items else "0"
    return "%s const %s tc__fatbin_%s[%d] = { %s };" % (hidden, ctype, name, max(n, 1), body)


lines += ["_Static_assert(%d <= TC__FATBIN_PARTS, \"kernels/meson.build embeds more fatbins than "
          "TC__FATBIN_PARTS (src/runtime/internal.h) holds\");" % n,
          "%s const int tc__fatbin_count = %d;" % (hidden, n),
          table("unsigned char *const", "images", ["part%d" % i for i in range(n)]),
          table("size_t", "sizes", [str(s) for s in sizes]),
          table("char *const", "part_files", [c_string(f) for _, _, f in a.part]),
          "%s const char tc__fatbin_targets[] = %s;" % (hidden, c_string(summary)), ""]
with open(a.output, "w") as fh:
    fh.write("\n".join(lines))
