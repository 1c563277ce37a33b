#!/usr/bin/env python3
"""Embed a fatbin in C: tc__fatbin, tc__fatbin_size and tc__fatbin_targets.

Usage: embed.py OUTPUT.c [FATBIN] --targets "sm_80 ..."
With no FATBIN (a build without nvcc) the array is empty and the size 0.
"""
import argparse

ap = argparse.ArgumentParser()
ap.add_argument("output")
ap.add_argument("fatbin", nargs="?")
ap.add_argument("--targets", default="none")
a = ap.parse_args()
data = open(a.fatbin, "rb").read() if a.fatbin else b""
lines = ["/* Written by tools/build/embed.py at build time from nvcc's fatbin. */",
         "#include <stddef.h>", "",
         "/* 8-byte aligned: the driver reads the fatbin header in place. */",
         "__attribute__((aligned(8), visibility(\"hidden\"))) const unsigned char tc__fatbin[%d] = {"
         % max(len(data), 1)]
for i in range(0, len(data), 24):
    lines.append("    " + ",".join(str(b) for b in data[i:i + 24]) + ",")
if not data:
    lines.append("    0")
lines += ["};",
          "__attribute__((visibility(\"hidden\"))) const size_t tc__fatbin_size = %d;" % len(data),
          "__attribute__((visibility(\"hidden\"))) const char tc__fatbin_targets[] = \"%s\";"
          % a.targets, ""]
with open(a.output, "w") as fh:
    fh.write("\n".join(lines))
