#!/usr/bin/env python3
"""Write one .cu that includes every kernels/*.cu given, so nvcc makes one fatbin of all.

Usage: unity.py OUTPUT KERNEL.cu...
"""
import os
import sys

out, srcs = sys.argv[1], sys.argv[2:]
text = "// Written by tools/build/unity.py at build time: every kernel file in one fatbin.\n"
text += "".join('#include "%s"\n' % os.path.abspath(s) for s in srcs)
old = open(out).read() if os.path.exists(out) else None
if old != text:
    with open(out, "w") as fh:
        fh.write(text)
