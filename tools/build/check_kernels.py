#!/usr/bin/env python3
"""Fail the build when kernels/ holds a .cu file that kernels/meson.build does not compile:
the generator writes launchers for every kernels/*.cu, so such a kernel would build and then
fail at every launch. Runs on every build (new files do not make meson reconfigure).

Usage: check_kernels.py KERNELS_DIR STAMP LISTED.cu...
"""
import glob
import os
import sys


def main():
    kdir, stamp, listed = sys.argv[1], sys.argv[2], sys.argv[3:]
    present = {os.path.basename(p) for p in glob.glob(os.path.join(kdir, "*.cu"))}
    missing = sorted(present - {os.path.basename(p) for p in listed})
    if missing:
        print("kernels/meson.build: %s not in kernel_sources; add %s there (the generator "
              "writes launchers for every kernels/*.cu, so a kernel left out of the fatbin "
              "fails at every launch)"
              % (", ".join(missing), "it" if len(missing) == 1 else "them"), file=sys.stderr)
        return 1
    with open(stamp, "w") as fh:
        fh.write("%d kernel files\n" % len(present))
    return 0


if __name__ == "__main__":
    sys.exit(main())
