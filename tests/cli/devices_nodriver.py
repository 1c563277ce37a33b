#!/usr/bin/env python3
"""`thincuda devices` without a driver: exit status 1, one sentence on stderr, no stdout.

Usage: devices_nodriver.py THINCUDA_BINARY (run with THINCUDA_LIBCUDA pointing nowhere)
"""
import subprocess
import sys

exe = sys.argv[1]
failed = 0
for args in (["devices"], ["devices", "--json"]):
    r = subprocess.run([exe] + args, capture_output=True, text=True, timeout=30)
    lines = r.stderr.strip().splitlines()
    ok = (r.returncode == 1 and r.stdout == "" and len(lines) == 1
          and lines[0].startswith("thincuda: no NVIDIA driver"))
    print("%s: %s exit %d, stderr %r" % ("ok" if ok else "FAIL", " ".join(args), r.returncode,
                                          r.stderr.strip()))
    failed += not ok
r = subprocess.run([exe, "devices", "--bogus"], capture_output=True, text=True, timeout=30)
ok = r.returncode == 2 and "unknown option '--bogus'" in r.stderr
print("%s: devices --bogus exit %d" % ("ok" if ok else "FAIL", r.returncode))
failed += not ok
r = subprocess.run([exe, "frobnicate"], capture_output=True, text=True, timeout=30)
ok = r.returncode == 2 and "unknown command 'frobnicate'" in r.stderr
print("%s: unknown command exit %d" % ("ok" if ok else "FAIL", r.returncode))
failed += not ok
sys.exit(1 if failed else 0)
