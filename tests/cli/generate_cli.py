#!/usr/bin/env python3
"""`thincuda generate`, `chat` and `info` on the CPU backend with the real SmolLM2 (skips,
exit 77, when tools/fetch-model has not downloaded it): greedy output equals the text of
transformers' tokens (tests/model/smollm2_expected.json), chat answers two turns from stdin,
info names the model, and bad flags or files give one sentence and exit 2 or 1; with an FP8 KV
cache generate still begins with transformers' first tokens and info halves the cache's bytes.

Usage: generate_cli.py THINCUDA_BINARY EXPECTED_JSON (run with THINCUDA_LIBCUDA pointing nowhere)
"""
import json
import os
import subprocess
import sys

exe, expected = sys.argv[1], sys.argv[2]
cache = os.environ.get("THINCUDA_CACHE") or os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "thincuda")
model = os.path.join(cache, "SmolLM2-135M-Instruct.Q4_1.gguf")
failed = 0


def check(ok, what):
    global failed
    print(("ok: " if ok else "FAIL: ") + what)
    failed += not ok


def run(args, stdin=None):
    return subprocess.run([exe] + args, capture_output=True, text=True, input=stdin, timeout=300)


r = run(["generate", "--prompt", "x"])
check(r.returncode == 2 and "--model PATH is required" in r.stderr, "generate without --model: exit 2")
r = run(["generate", "--model", "/nonexistent.gguf", "--prompt", "x"])
check(r.returncode == 1 and "cannot open /nonexistent.gguf" in r.stderr and r.stdout == "",
      "missing file: exit 1, one sentence")
r = run(["generate", "--model", exe, "--prompt", "x"])
check(r.returncode == 1 and "not a GGUF file" in r.stderr, "a file that is not GGUF: exit 1")
for flag, value in (("--top-p", "1.5"), ("-n", "many"), ("--device", "tpu"), ("--temperature", "-1"),
                    ("--kv-cache-dtype", "fp4")):
    r = run(["generate", "--model", model, "--prompt", "x", flag, value])
    check(r.returncode == 2 and r.stderr.count("\n") >= 1, f"generate {flag} {value}: exit 2")
if not os.path.exists(model):
    print(f"skipped: SmolLM2 is not downloaded ({model})")
    sys.exit(77 if not failed else 1)

exp = json.load(open(expected))["generate"][0]
r = run(["generate", "--model", model, "--prompt", exp["prompt"], "-n", "32", "--temperature", "0",
         "--device", "cpu"])
r_info = run(["info", "--model", model])
check(r_info.returncode == 0 and "architecture     llama" in r_info.stdout and "134.5 M" in r_info.stdout,
      "info: architecture and parameter count")
# transformers' continuation begins " Paris." (token 7042, then "."; see the expected file).
check(exp["ids"][:2] == [7042, 30] and r.returncode == 0 and r.stdout.startswith(" Paris.") and "tokens/s" in r.stderr,
      f"generate greedy: stdout {r.stdout[:40]!r}, tokens/s on stderr")
r2 = run(["generate", "--model", model, "--prompt", exp["prompt"], "-n", "32", "--temperature", "0",
          "--device", "cpu"])
check(r2.stdout == r.stdout, "greedy output repeats")
r8 = run(["generate", "--model", model, "--prompt", exp["prompt"], "-n", "8", "--temperature", "0",
          "--device", "cpu", "--kv-cache-dtype", "fp8"])
check(r8.returncode == 0 and r8.stdout.startswith(" Paris."), f"generate with an FP8 cache: {r8.stdout[:40]!r}")
kib = {}
for kv in ("auto", "fp8"):
    ri = run(["info", "--model", model, "--device", "cpu", "--kv-cache-dtype", kv])
    m = [w for w in ri.stdout.split("KV cache ")[1:2]]
    kib[kv] = float(m[0].split(" KiB")[0]) if m else None
check(None not in kib.values() and kib["fp8"] > 0 and abs(kib["auto"] / kib["fp8"] - 4) < 0.05,
      f"info: KV cache {kib.get('auto')} KiB/token in f32, {kib.get('fp8')} in FP8")
r3 = run(["generate", "--model", model, "--prompt", "Tell me a story", "-n", "24", "--temperature", "0.9",
          "--seed", "7", "--device", "cpu"])
r4 = run(["generate", "--model", model, "--prompt", "Tell me a story", "-n", "24", "--temperature", "0.9",
          "--seed", "7", "--device", "cpu"])
check(r3.returncode == 0 and r3.stdout == r4.stdout and r3.stdout != "", "sampling with a seed repeats")
r = run(["chat", "--model", model, "--device", "cpu", "--temperature", "0", "-n", "24"],
        stdin="What is the capital of France?\nAnd of Italy?\n")
lines = [l for l in r.stdout.splitlines() if l.strip()]
check(r.returncode == 0 and len(lines) >= 2 and "Paris" in lines[0], f"chat: two answers, {lines[:2]!r}")
sys.exit(1 if failed else 0)
