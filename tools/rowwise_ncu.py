"""One launch of hkjit's default schedule and of torch's kernels for the cases below, inside a
cudaProfilerStart/Stop range, for Nsight Compute (PROFILE_BEST=1 adds the best variant of
$SWEEP_OUT/rowwise_sweep.json). Arguments pick cases: an op name, or op:columns:rows.

    ncu --profile-from-start off --target-processes application-only --section SpeedOfLight \
        --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy \
        --section SchedulerStats --csv --page details --log-file ncu.csv \
        python3 tools/rowwise_ncu.py layer_norm rms_norm:128:65536
    python3 tools/ncu_summary.py ncu.csv

Prints the launch order (PROFILE lines); kernel names tell torch's apart.
"""
import json
import os
import sys

import torch
import hkjit

CASES = [("gelu", dict(rows=16384, cols=4096, dtype="bfloat16"), ("eager",)),
         ("gelu_and_mul", dict(rows=16384, x_cols=8192, dtype="bfloat16"), ("compile",)),
         ("layer_norm", dict(rows=65536, hidden=128, dtype="bfloat16"), ("compile",)),
         ("layer_norm", dict(rows=16384, hidden=8192, dtype="bfloat16"), ("compile",)),
         ("rms_norm", dict(rows=65536, hidden=128, dtype="bfloat16"), ("compile",)),
         ("dropout_add_layer_norm", dict(rows=65536, hidden=128, dtype="bfloat16"), ("compile",)),
         ("add_rms_norm", dict(rows=65536, hidden=128, dtype="bfloat16"), ("compile",)),
         ("add_rms_norm", dict(rows=128, hidden=128, dtype="bfloat16"), ("compile",)),
         ("rope", dict(b=4, heads=32, n=1024, d=128, layout="bhnd", dtype="bfloat16"), ("compile",))]
if len(sys.argv) > 1:
    def _names(c):
        width = c[1].get("hidden") or c[1].get("cols") or c[1].get("x_cols") or c[1].get("d")
        return {c[0], f"{c[0]}:{width}:{c[1].get('rows', c[1].get('n'))}"}
    CASES = [c for c in CASES if _names(c) & set(sys.argv[1:])]


def best_tiles(path):
    try:
        results = json.load(open(path))
    except OSError:
        return {}
    best = {}
    for r in results:
        ok = [x for x in r["rows"] if "best_us" in x]
        if ok:
            best[(r["op"], json.dumps(r["case"], sort_keys=True))] = min(ok, key=lambda x: x["best_us"])["tiles"]
    return best


best = best_tiles(os.path.join(os.environ.get("SWEEP_OUT", "."), "rowwise_sweep.json"))
plan = []
for name, case, peers in CASES:
    op = hkjit.ops.get(name)
    args, kwargs = op.bench_inputs(case, torch)
    fn = getattr(hkjit, name)
    fns = [("hkjit default", lambda fn=fn, a=args, k=kwargs: fn(*a, **k))]
    tiles = best.get((name, json.dumps(case, sort_keys=True)))
    if tiles and os.environ.get("PROFILE_BEST") == "1":
        fns.append((f"hkjit best {tiles}", lambda fn=fn, a=args, k=kwargs, t=tiles: fn(*a, **k, **t)))
    ps = op.bench_peers(torch)
    if "eager" in peers:
        fns.append(("torch eager", lambda f=ps["torch eager"], a=args, k=kwargs: f(*a, **k)))
    if "compile" in peers:
        fns.append(("torch.compile", lambda f=ps["torch.compile"], a=args, k=kwargs: f(*a, **k)))
    for _, f in fns:
        f()
        f()
    plan.append((name, case, fns))
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStart()
for name, case, fns in plan:
    for label, f in fns:
        print(f"PROFILE {name} {case} {label}", flush=True)
        f()
        torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStop()
