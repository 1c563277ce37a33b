#!/usr/bin/env python3
"""`thincuda bench` on the CPU backend with random SmolLM2-135M weights (nothing to download):
bad flags give one line naming the flag and exit 2 (a missing file or driver exit 1); latency
mode reports its batch, decode rate and ordered percentiles, and both modes how many measured
steps ran prefill rows and how long each kind took; throughput mode's figures agree with
each other, and its bandwidth line with the model's size and the keys and values its requests
had to read, worked out here from SmolLM2's shape; with --kv-cache-dtype fp8 the cache line and
the bandwidth line count one byte a cached value. With the real SmolLM2 (when tools/fetch-model
has downloaded it), --json-object and --json-schema run the requests again under the grammar
and print both decode rates and the overhead, as does a named shape with --tokenizer (a
vocabulary-only GGUF from tests/model/data); a grammar without a tokenizer, two grammars, a
missing or unsupported schema, --tokenizer without --shape and a grammar exit 2.
--tensor-parallel refuses bad counts (exit 2), heads the ranks do not divide or whose columns of
a quantised file's wo would cut K-quant blocks and, without GPUs, any sharded run (exit 1), also
a K-quant file whose feed-forward width the ranks split in whole blocks.

Usage: bench_cli.py THINCUDA_BINARY (run with THINCUDA_LIBCUDA pointing nowhere)
"""
import json
import os
import re
import subprocess
import sys
import tempfile

exe = sys.argv[1]
failed = 0


def check(ok, what):
    global failed
    print(("ok: " if ok else "FAIL: ") + what)
    failed += not ok


def run(args):
    return subprocess.run([exe, "bench"] + args, capture_output=True, text=True, timeout=600)


def field(pattern, text, what):
    m = re.search(pattern, text, re.M)
    check(m is not None, f"{what} is printed")
    return [float(g) for g in m.groups()] if m else None


shape = ["--shape", "smollm2-135m", "--threads", "2"]
for args, flag in ((["--batch", "0"], "--batch"), (["--batch=1.5"], "--batch"),
                   (["--prompt-len", "-3"], "--prompt-len"), (["--gen-len", "x"], "--gen-len"),
                   (["--requests", "many"], "--requests"), (["--dtype", "f8"], "--dtype"),
                   (["--device", "tpu"], "--device"), (["--bandwidth", "0"], "--bandwidth"),
                   (["--kv-fraction", "2"], "--kv-fraction"), (["--kv-cache-dtype", "int4"], "--kv-cache-dtype"),
                   (["--tensor-parallel", "0"], "--tensor-parallel"),
                   (["--tensor-parallel", "17"], "--tensor-parallel"),
                   (["--tensor-parallel", "two"], "--tensor-parallel"),
                   (["--frobnicate"], "--frobnicate")):
    r = run(shape + args)
    first = r.stderr.splitlines()[0] if r.stderr else ""
    check(r.returncode == 2 and first.startswith("thincuda bench: ") and flag in first and r.stdout == "",
          f"{' '.join(args)}: exit 2, names {flag} ({first!r})")
r = run([])
check(r.returncode == 2 and "--model PATH or --shape NAME" in r.stderr, "neither --model nor --shape: exit 2")
# --tensor-parallel: the plan refuses head counts the ranks do not divide (SmolLM2's 9 heads over
# 2) before any GPU is touched; a shape it divides needs GPUs, here absent (the CPU fallback),
# and so does one rank through NCCL (THINCUDA_TP_NCCL=1).
r = run(shape + ["--tensor-parallel", "2"])
check(r.returncode == 1 and "--tensor-parallel 2" in r.stderr and "9 attention heads" in r.stderr
      and "do not split evenly" in r.stderr, f"9 heads over 2 ranks: exit 1, the plan's words ({r.stderr[-160:]!r})")
r = run(["--shape", "llama2-7b", "--tensor-parallel", "4"])
check(r.returncode == 1 and "--tensor-parallel 4 runs on GPUs only" in r.stderr,
      f"no GPU: exit 1, says GPUs are needed ({r.stderr[-160:]!r})")
# The plan takes the file's quantisation blocks: tests/gpu/quant_gguf.py's tiny Q4_K_M (4 heads
# of 64) would put half a q4_k block of wo's columns on each of 2 ranks; tiny-k's (heads of 128,
# Llama-2-7B's feed-forward width of 43 blocks) splits, 22 + 21 blocks, and needs the GPUs.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "gpu"))
import quant_gguf  # noqa: E402
with tempfile.TemporaryDirectory() as tmp:
    for name, want in (("tiny", "2 attention heads are 128 columns of attn_output, not whole q4_k "
                                "blocks of 256"),
                       ("tiny-k", "--tensor-parallel 2 runs on GPUs only")):
        path = os.path.join(tmp, name + ".gguf")
        quant_gguf.write(path, name, "Q4_K_M")
        r = run(["--model", path, "--tensor-parallel", "2"])
        check(r.returncode == 1 and want in r.stderr,
              f"{name} Q4_K_M over 2 ranks: exit 1, {want!r} ({r.stderr[-160:]!r})")
r = subprocess.run([exe, "bench"] + shape + ["--tensor-parallel", "1", "--gen-len", "2", "--prompt-len", "2"],
                   capture_output=True, text=True, timeout=600, env=dict(os.environ, THINCUDA_TP_NCCL="1"))
check(r.returncode == 1 and "--tensor-parallel 1 runs on GPUs only" in r.stderr,
      f"THINCUDA_TP_NCCL=1 takes the NCCL path with one rank ({r.stderr[-160:]!r})")
r = run(["--shape", "smollm2-1t"])
check(r.returncode == 2 and "unknown shape 'smollm2-1t'" in r.stderr, "unknown shape: exit 2")
# A shape past the host's memory is refused whole, with the sizes, before anything is filled
# (Linux grants the memory and would kill the process when the pages are touched).
with open("/proc/meminfo") as f:
    avail_gib = next(int(x.split()[1]) for x in f if x.startswith("MemAvailable:")) / (1 << 20)
if avail_gib < 250:
    r = run(["--shape", "llama3.1-70b", "--gen-len", "2", "--prompt-len", "2"])
    check(r.returncode == 1 and re.search(r"its [0-9.]+ GiB of f32 weights do not fit in the [0-9.]+ GiB", r.stderr),
          f"a 70B shape on the CPU: exit 1, says it does not fit ({r.stderr[-200:]!r})")
else:
    print(f"skip: a 70B shape's 263 GiB of f32 would fit in this host's {avail_gib:.0f} GiB")
r = run(["--model", "/nonexistent.gguf"])
check(r.returncode == 1 and "cannot open /nonexistent.gguf" in r.stderr, "missing model file: exit 1")
r = run(shape + ["--device", "cuda"])
check(r.returncode == 1 and "no NVIDIA driver" in r.stderr and "Traceback" not in r.stderr,
      "--device cuda without a driver: exit 1, says why")

# Latency mode: two sequences of 8 prompt and 6 generated tokens.
r = run(shape + ["--batch", "2", "--prompt-len", "8", "--gen-len", "6"])
out = r.stdout
check(r.returncode == 0, f"latency mode runs (exit {r.returncode}: {r.stderr[-200:]!r})")
check(re.search(r"^batch\s+2 x \(8 prompt \+ 6 generated tokens\)$", out, re.M) is not None, "batch line")
dec = field(r"^decode\s+([\d.]+) tokens/s \(([\d.]+) per sequence\)$", out, "decode rate")
if dec:
    check(dec[0] > 0 and abs(dec[1] * 2 - dec[0]) <= 0.11, f"decode {dec[0]} tokens/s, {dec[1]} per sequence")
for name in ("time to first", "inter-token"):
    p = field(rf"^{name}\s+p50 ([\d.]+) ms, p99 ([\d.]+) ms$", out, name)
    if p:
        check(0 < p[0] <= p[1], f"{name}: 0 < p50 {p[0]} <= p99 {p[1]}")
steps = field(r"^engine\s+(\d+) steps, (\d+) preemptions", out, "engine steps")
if steps:
    check(steps[0] >= 6, f"{steps[0]:.0f} engine steps for 6 tokens")
ft = field(r"^first token\s+([\d.]+) s from start \(load, then the first 8-token prompt\)$", out,
           "first token line")
proc = field(r"^process\s+([\d.]+) s from start$", out, "process line")
if ft and proc:
    check(0 < ft[0] <= proc[0] + 0.005, f"first token {ft[0]} s after start, before the end {proc[0]} s")
STEPS = (r"^steps\s+(\d+) measured: (\d+) with prefill rows \(([\d.]+) s\), (\d+) decode only "
         r"\(([\d.]+) s, ([\d.]+) ms each\)$")
split = field(STEPS, out, "steps line")
if split and steps:
    n, pre, pre_s, dec, dec_s, each = split
    check(n == pre + dec and pre >= 1 and dec >= 5 and n <= steps[0],
          f"{n:.0f} measured steps = {pre:.0f} with prefill rows + {dec:.0f} decode only")
    check(pre_s > 0 and dec_s > 0 and abs(each * dec / 1e3 - dec_s) <= 0.0005 * dec + 0.002,
          f"{pre_s} s of prefill steps, {dec_s} s of decode steps, {each} ms each")

# Throughput mode: 5 requests of 4..12 prompt and 3..9 output tokens; --bandwidth 1e9 keeps
# the floor in whole seconds. Then the same with an FP8 cache: a quarter of the f32 cache's
# bytes read.
kv_read, outs = {}, {}
for fp8 in (False, True):
    r = run(shape + ["--requests", "5", "--prompt-len", "8", "--gen-len", "6", "--bandwidth", "1e9"]
            + (["--kv-cache-dtype", "fp8"] if fp8 else []))
    check(r.returncode == 0, f"throughput mode runs{' (fp8)' if fp8 else ''} (exit {r.returncode}: {r.stderr[-200:]!r})")
    check(re.search(r"GiB of %s" % ("f8e4m3" if fp8 else "f32"), r.stderr) is not None,
          f"the cache line names {'f8e4m3' if fp8 else 'f32'}")
    m = re.search(r"^bandwidth\s+([\d.]+) GB of keys and values", r.stdout, re.M)
    kv_read[fp8] = float(m.group(1)) if m else None
    outs[fp8] = r.stdout
check(None not in kv_read.values() and abs(kv_read[True] * 4 - kv_read[False]) <= 0.0005,
      f"keys and values read: {kv_read[True]} GB with FP8, {kv_read[False]} GB with f32")
out = outs[False]
gib = field(r"^model\s+.*, ([\d.]+) GiB of weights", out, "model size")
req = field(r"^requests\s+5 \(prompts 4\.\.12, outputs 3\.\.9 tokens\), ([\d.]+) s$", out, "requests line")
tput = field(r"^throughput\s+([\d.]+) requests/s, (\d+) output tokens/s", out, "throughput line")
bw = field(r"^bandwidth\s+([\d.]+) GB of keys and values \+ ([\d.]+) GB of weights \((\d+) steps\) = "
           r"([\d.]+) s at ([\d.]+) TB/s, ([\d.]+)% of the run; (\d+) output tokens/s at most$", out, "bandwidth line")
eng = field(r"^engine\s+(\d+) steps", out, "engine steps")
split = field(STEPS, out, "steps line")
if gib and req and tput and bw and eng and split:
    wall = req[0]
    kv, w, s, floor, tbs, pct, most = bw
    # Figures are printed rounded (requests/s and seconds to 0.01, tokens/s to 1), so a figure
    # worked out from printed ones is checked against the range their rounding allows; a slow
    # machine (the sanitizer build) makes those ranges wide.
    lo, hi = (tput[0] - 0.005) * (wall - 0.005), (tput[0] + 0.005) * (wall + 0.005)
    check(0.99 * lo <= 5 <= 1.01 * hi, f"{tput[0]} requests/s over {wall} s is 5 requests")
    check(1 <= s <= eng[0], f"{s:.0f} measured steps of {eng[0]:.0f} in all")
    check(split[0] == s and split[2] + split[4] <= wall + 0.01,
          f"the steps line counts the {s:.0f} measured steps, {split[2] + split[4]:.3f} s of {wall} s")
    check(abs(w / s - gib[0] * 2**30 / 1e9) <= 0.02 * w / s, f"weights read once a step: {w / s:.3f} GB")
    # SmolLM2: 30 layers, 3 KV heads of 64, keys and values in f32 on the CPU. A request of P
    # prompt and G output tokens reads (G - 1) P + G (G - 1) / 2 positions.
    per_pos = 30 * 2 * 3 * 64 * 4
    lo, hi = 5 * (2 * 4 + 3) * per_pos / 1e9, 5 * (8 * 12 + 36) * per_pos / 1e9
    check(lo - 0.0005 <= kv <= hi + 0.0005, f"keys and values read: {kv} GB in [{lo:.4f}, {hi:.4f}]")
    check(tbs == 0.0 and abs(floor - (kv + w)) <= 0.01 * floor + 0.01, f"floor {floor} s = {kv + w:.3f} GB at 1 GB/s")
    check(abs(pct - 100 * floor / wall) <= 0.01 * pct + 0.1, f"{pct}% of the run")
    lo = (tput[1] - 0.5) * (wall - 0.005) / (floor + 0.005) - 0.5
    hi = (tput[1] + 0.5) * (wall + 0.005) / (floor - 0.005) + 0.5
    check(0.99 * lo <= most <= 1.01 * hi, f"at most {most:.0f} output tokens/s, in [{lo:.1f}, {hi:.1f}]")
# Constrained decoding: the grammar needs token texts.
r = run(shape + ["--json-object"])
check(r.returncode == 2 and "--model PATH" in r.stderr, "--json-object with --shape: exit 2, asks for --model")
r = run(["--model", "x.gguf", "--json-object", "--json-schema", "s.json"])
check(r.returncode == 2 and "one of --json-object or --json-schema" in r.stderr, "two grammars: exit 2")
r = run(["--model", "x.gguf", "--json-schema", "/nonexistent.json"])
check(r.returncode == 2 and "/nonexistent.json" in r.stderr, "missing schema file: exit 2, names it")
r = run(shape + ["--tokenizer", "x.gguf"])
check(r.returncode == 2 and "--tokenizer goes with --shape and a grammar" in r.stderr, "--tokenizer without a grammar: exit 2")
r = run(["--model", "x.gguf", "--tokenizer", "x.gguf", "--json-object"])
check(r.returncode == 2 and "--tokenizer goes with --shape" in r.stderr, "--tokenizer with --model: exit 2")
# Random weights with another model's vocabulary (32,000 tokens of SmolLM2's 49,152): tokens past
# it are never allowed, and the free run may still produce them.
vocab = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "model", "data", "mistral-v1.vocab.gguf")
r = run(shape + ["--tokenizer", vocab, "--json-object", "--batch", "2", "--prompt-len", "8", "--gen-len", "6"])
check(r.returncode == 0 and re.search(r"^decode grammar\s+[\d.]+ tokens/s", r.stdout, re.M) is not None
      and re.search(r"^documents\s+\d+ of 12 tokens were control tokens after a document ended$", r.stdout, re.M) is not None,
      f"--shape with --tokenizer runs constrained (exit {r.returncode}: {r.stderr[-200:]!r})")
cache = os.environ.get("THINCUDA_CACHE") or os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "thincuda")
model = os.path.join(cache, "SmolLM2-135M-Instruct.Q4_1.gguf")
if not os.path.exists(model):
    print(f"skipped: constrained runs need SmolLM2 ({model})")
else:
    with tempfile.TemporaryDirectory() as tmp:
        bad, good = os.path.join(tmp, "bad.json"), os.path.join(tmp, "good.json")
        with open(bad, "w") as f:
            json.dump({"type": "string", "pattern": "a+"}, f)
        with open(good, "w") as f:
            json.dump({"type": "object", "properties": {"name": {"type": "string"},
                       "books": {"type": "array", "items": {"type": "string"}}},
                       "required": ["name", "books"]}, f)
        r = run(["--model", model, "--device", "cpu", "--threads", "2", "--json-schema", bad])
        check(r.returncode == 2 and "'pattern'" in r.stderr, f"unsupported schema: exit 2, names the keyword ({r.stderr[-120:]!r})")
        for grammar in (["--json-object"], ["--json-schema", good]):
            r = run(["--model", model, "--device", "cpu", "--threads", "2", "--batch", "2",
                     "--prompt-len", "12", "--gen-len", "8"] + grammar)
            out = r.stdout
            check(r.returncode == 0, f"{grammar[0]} runs (exit {r.returncode}: {r.stderr[-200:]!r})")
            free = field(r"^decode free\s+([\d.]+) tokens/s \(([\d.]+) ms a decode-only step\)$", out, "free decode rate")
            con = field(r"^decode grammar\s+([\d.]+) tokens/s \(([\d.]+) ms a decode-only step\)$", out, "constrained rate")
            over = field(r"^overhead\s+(-?[\d.]+)% more time a token under the grammar$", out, "overhead")
            if free and con and over:
                # Rates are printed to 0.1 and the overhead to 0.1%: check against the range that
                # the rounding allows.
                lo = 100 * ((free[0] - 0.05) / (con[0] + 0.05) - 1) - 0.05
                hi = 100 * ((free[0] + 0.05) / (con[0] - 0.05) - 1) + 0.05
                check(free[0] > 0 and con[0] > 0 and lo <= over[0] <= hi,
                      f"overhead {over[0]}% from {free[0]} and {con[0]} tokens/s, in [{lo:.2f}, {hi:.2f}]")
            docs = field(r"^documents\s+(\d+) of (\d+) tokens were control tokens after a document ended$",
                         out, "documents line (no request ended in an error)")
            if docs:
                check(docs[1] == 2 * 8, f"{docs[1]:.0f} constrained tokens for 2 x 8")
sys.exit(1 if failed else 0)
