#!/usr/bin/env python3
"""A table of an ncu CSV (`ncu --csv --page raw --metrics ...`): one row per kernel and grid
size, the median of each metric over its launches, in the order the metrics were asked for.
Usage: ncu_table.py NCU_CSV METRIC[,METRIC...]"""
import csv
import sys


def main():
    path, metrics = sys.argv[1], sys.argv[2].split(",")
    rows = list(csv.reader(open(path, newline="")))
    head = next((i for i, r in enumerate(rows) if r and r[0] == "ID"), None)
    if head is None:
        sys.exit(f"{path}: no ncu table (ID column) in it")
    cols = rows[head]
    missing = [m for m in metrics + ["Kernel Name", "launch__grid_size"] if m not in cols]
    if missing:
        sys.exit(f"{path}: no column {', '.join(missing)}")
    at = {c: j for j, c in enumerate(cols)}

    def num(text):
        try:
            return float(text.replace(",", ""))
        except ValueError:
            return None

    groups = {}
    for r in rows[head + 1:]:
        if len(r) == len(cols) and r[0].isdigit():
            groups.setdefault((r[at["Kernel Name"]], r[at["launch__grid_size"]]), []).append(r)
    short = [m.split("__", 1)[-1].replace(".avg.pct_of_peak_sustained_", "% ").replace("_per_issue_active.ratio", "")
             for m in metrics]
    print("kernel".ljust(34), "grid".rjust(6), "n".rjust(4), *(s[:22].rjust(22) for s in short))
    for (name, grid), rs in groups.items():
        vals = []
        for m in metrics:
            got = sorted(v for v in (num(x[at[m]]) for x in rs) if v is not None)
            vals.append("%.4g" % got[len(got) // 2] if got else "-")
        print(name[:34].ljust(34), grid.rjust(6), str(len(rs)).rjust(4), *(v.rjust(22) for v in vals))


if __name__ == "__main__":
    main()
