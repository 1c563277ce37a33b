#!/usr/bin/env python3
"""`thincuda devices` with the fake driver: NVML's figures when the fake NVML loads, and one
line saying NVML is unavailable (exit 0 all the same) when it does not.

Usage: devices_nvml.py THINCUDA_BINARY FAKE_NVML (THINCUDA_LIBCUDA set to the fake driver)
"""
import json
import os
import subprocess
import sys

exe, fake_nvml = sys.argv[1], sys.argv[2]
failed = 0


def run(nvml, *args):
    env = dict(os.environ, THINCUDA_LIBNVML=nvml)
    return subprocess.run([exe, "devices"] + list(args), capture_output=True, text=True,
                          timeout=30, env=env)


def check(ok, what):
    global failed
    print("%s: %s" % ("ok" if ok else "FAIL", what))
    failed += not ok


r = run(fake_nvml)
check(r.returncode == 0, "devices exits 0 with NVML (%d: %s)" % (r.returncode, r.stderr.strip()))
for line in ("temperature                  61 C", "power                        123.5 W",
             "utilisation                  gpu 87%, memory 42%",
             "ecc                          on: 3 corrected, 0 uncorrected since boot",
             "processes                    2", "pid 4194305  python3"):
    check(line in r.stdout, "the table shows %r" % line)
r = run(fake_nvml, "--json")
nvml = json.loads(r.stdout)["devices"][0]["nvml"] if r.returncode == 0 else {}
check(nvml.get("temperature_c") == 61 and nvml.get("power_limit_w", 0) is None
      and len(nvml.get("processes", [])) == 2, "--json carries the figures: %s" % nvml)
r = run("/nonexistent/libnvidia-ml.so.1")
check(r.returncode == 0 and "nvml                         NVML is unavailable" in r.stdout
      and "THINCUDA_LIBNVML" in r.stdout and "temperature" not in r.stdout,
      "without NVML: exit %d, one line saying why" % r.returncode)
r = run("/nonexistent/libnvidia-ml.so.1", "--json")
check(r.returncode == 0 and "unavailable" in json.loads(r.stdout)["devices"][0]["nvml"],
      "--json without NVML says unavailable")
sys.exit(1 if failed else 0)
