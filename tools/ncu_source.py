#!/usr/bin/env python3
"""Where a kernel's warps spend their time, from ncu's source view of its SASS:

    ncu --set full -o REP ...; ncu -i REP.ncu-rep --page source --print-source sass --csv > SRC.csv
    tools/ncu_source.py SRC.csv [--weights N[,N...]] [--top K]

For each kernel in the file (in order): the warp instructions it issued and the sampled warp
stalls by reason; its instructions grouped by how many times each ran (a loop's body runs as
often as its iterations, the code before and after it once a warp), each group's share of the
instructions issued and of the samples, with its main stall reasons; the opcodes that issued
most; the K instructions with the most samples. --weights N[,N...] (the elements each kernel's
product multiplies, in the kernels' order; the last given stands for the rest) adds the weights
each warp instruction covers."""
import argparse
import collections
import csv
import sys

ISSUED = "Instructions Executed"
SAMPLES = "Warp Stall Sampling (All Samples)"


class Kernel:
    def __init__(self, name):
        self.name, self.rows, self.columns = name, [], None


def read(path):
    """The kernels of an ncu source-view CSV: each a "Kernel Name" line, a header, its rows."""
    kernels = []
    with open(path, newline="") as f:
        for r in csv.reader(f):
            if not r:
                continue
            if r[0] == "Kernel Name":
                kernels.append(Kernel(r[1] if len(r) > 1 else "?"))
            elif kernels and kernels[-1].columns is None:
                kernels[-1].columns = r
            elif kernels and len(r) == len(kernels[-1].columns):
                kernels[-1].rows.append(dict(zip(kernels[-1].columns, r)))
    for k in kernels:
        missing = [c for c in (ISSUED, SAMPLES, "Source") if c not in (k.columns or [])]
        if missing:
            sys.exit(f"{path}: kernel {k.name} has no column {', '.join(missing)} "
                     "(ask ncu for --page source --print-source sass --csv of a --set full report)")
    return kernels


def num(text):
    try:
        return int(float(text.replace(",", "")))
    except ValueError:
        return 0


def opcode(source):
    """The instruction's opcode without its predicate and modifiers: "@!P0 LDS.128 R4, [R2]"
    -> "LDS"."""
    words = source.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0].split(".")[0] if words else "?"


def stalls(row):
    """The row's sampled stalls by reason (the all-samples columns, not the not-issued ones)."""
    return {c[len("stall_"):]: num(v) for c, v in row.items()
            if c.startswith("stall_") and "Not Issued" not in c and num(v)}


def summary(kernel):
    """Totals, stall reasons, the groups by execution count (most sampled first) and the opcode
    mix of one kernel."""
    issued = sum(num(r[ISSUED]) for r in kernel.rows)
    samples = sum(num(r[SAMPLES]) for r in kernel.rows)
    reasons = collections.Counter()
    groups = {}
    mix = collections.Counter()
    for r in kernel.rows:
        n = num(r[ISSUED])
        s = stalls(r)
        reasons.update(s)
        g = groups.setdefault(n, {"runs": n, "instructions": 0, "issued": 0, "samples": 0,
                                  "reasons": collections.Counter()})
        g["instructions"] += 1
        g["issued"] += n
        g["samples"] += num(r[SAMPLES])
        g["reasons"].update(s)
        mix[opcode(r["Source"])] += n
    order = sorted((g for g in groups.values() if g["issued"] or g["samples"]),
                   key=lambda g: (-g["samples"], -g["issued"]))
    return {"issued": issued, "samples": samples, "reasons": reasons, "groups": order, "mix": mix}


def pct(a, b):
    return 100.0 * a / b if b else 0.0


def report(kernel, index, weights=0, top=10, out=None):
    out = out or sys.stdout
    s = summary(kernel)
    p = lambda *a: print(*a, file=out)
    p(f"== {index}: {kernel.name}: {s['issued']:,} warp instructions, {s['samples']:,} stall samples"
      + (f", {weights / s['issued']:.1f} weights an instruction" if weights and s["issued"] else ""))
    p("   stalls: " + ", ".join(f"{k} {pct(v, s['samples']):.0f}%" for k, v in s["reasons"].most_common(8)))
    p("   by runs of an instruction (instructions x runs: share of issued, of samples; stalls):")
    for g in s["groups"][:8]:
        why = ", ".join(f"{k} {pct(v, g['samples']):.0f}%" for k, v in g["reasons"].most_common(4))
        p(f"   {g['instructions']:6d} x {g['runs']:8,d}: {pct(g['issued'], s['issued']):5.1f}% issued, "
          f"{pct(g['samples'], s['samples']):5.1f}% samples; {why}")
    p("   opcodes: " + ", ".join(f"{k} {pct(v, s['issued']):.1f}%" for k, v in s["mix"].most_common(12)))
    hot = sorted(kernel.rows, key=lambda r: -num(r[SAMPLES]))[:top]
    for r in hot:
        if not num(r[SAMPLES]):
            break
        why = ", ".join(f"{k} {v}" for k, v in sorted(stalls(r).items(), key=lambda kv: -kv[1])[:3])
        p(f"   {pct(num(r[SAMPLES]), s['samples']):5.1f}% {r.get('Address', '')[-6:]:>6} "
          f"{r['Source'].strip()[:56]:56s} {why}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--weights", default="", help="elements each kernel's product multiplies, comma-separated")
    ap.add_argument("--top", type=int, default=10, help="instructions with the most samples")
    a = ap.parse_args(argv)
    kernels = read(a.csv)
    if not kernels:
        sys.exit(f"{a.csv}: no kernel in it")
    try:
        weights = [float(w) for w in a.weights.split(",")] if a.weights else [0.0]
    except ValueError:
        sys.exit(f"--weights: numbers separated by commas (got {a.weights!r})")
    for i, k in enumerate(kernels):
        report(k, i, weights[min(i, len(weights) - 1)], a.top)


if __name__ == "__main__":
    main()
