"""The cost of an eager repeat call on the host (µs per call, median of 7 runs of 20000 calls), on the
native and the Python repeat paths: run it under two checkouts to see whether a change slowed them.

    PYTHONPATH=<checkout> python3 tools/bench_repeat_call.py <label>
"""
import json
import sys
import time

import torch

import hkjit
from hkjit import launch


def timed(fn, n=20000):
    for _ in range(500):
        fn()
    torch.cuda.synchronize()
    runs = []
    for _ in range(7):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        runs.append((time.perf_counter() - t0) / n * 1e6)
        torch.cuda.synchronize()
    return round(sorted(runs)[len(runs) // 2], 2)


def main():
    x = torch.randn(8, 1024, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(1024, device="cuda", dtype=torch.bfloat16)
    out = torch.empty_like(x)
    a = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
    res = {"label": sys.argv[1] if len(sys.argv) > 1 else "", "device": torch.cuda.get_device_name()}
    res["rms_norm out= native"] = timed(lambda: hkjit.rms_norm(x, w, out=out))
    res["silu (allocates) native"] = timed(lambda: hkjit.silu(a))
    launch.use_native(False)
    res["rms_norm out= python"] = timed(lambda: hkjit.rms_norm(x, w, out=out))
    res["silu (allocates) python"] = timed(lambda: hkjit.silu(a))
    print(json.dumps(res))


if __name__ == "__main__":
    main()
