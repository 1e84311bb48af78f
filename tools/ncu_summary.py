"""Compact table of an `ncu --csv --page details` file: one line per profiled kernel."""
import csv
import sys
from collections import OrderedDict

WANT = OrderedDict([
    ("Duration", "us"), ("DRAM Throughput", "dram%"), ("Memory Throughput", "mem%"),
    ("Achieved Occupancy", "occ%"), ("Registers Per Thread", "regs"), ("Block Size", "block"),
    ("Grid Size", "grid"), ("Issued Warp Per Scheduler", "issue/sched"), ("No Eligible", "noelig%"),
    ("Issue Slots Busy", "slots%"), ("Eligible Warps Per Scheduler", "elig"),
    ("Warp Cycles Per Issued Instruction", "cyc/inst"), ("Executed Ipc Active", "ipc"),
    ("Executed Instructions", "inst"),
])


def main(path):
    rows = list(csv.reader(open(path, errors="replace")))
    start = next(i for i, r in enumerate(rows) if r and r[0] == "ID")
    head = rows[start]
    col = {h: i for i, h in enumerate(head)}
    kernels = OrderedDict()
    for r in rows[start + 1:]:
        if len(r) <= col["Metric Value"]:
            continue
        kid = r[col["ID"]]
        k = kernels.setdefault(kid, {"name": r[col["Kernel Name"]]})
        metric, unit, value = r[col["Metric Name"]], r[col["Metric Unit"]], r[col["Metric Value"]]
        if metric in WANT and WANT[metric] not in k:
            if metric == "Duration" and unit in ("msecond", "ms"):
                value = f"{float(value.replace(',', '')) * 1e3:.1f}"
            elif metric == "Duration" and unit in ("nsecond", "ns"):
                value = f"{float(value.replace(',', '')) / 1e3:.1f}"
            k[WANT[metric]] = value
    print("id | kernel | " + " | ".join(WANT.values()))
    for kid, k in kernels.items():
        print(f"{kid} | {k['name'][:48]} | " + " | ".join(k.get(v, "") for v in WANT.values()))


if __name__ == "__main__":
    main(sys.argv[1])
