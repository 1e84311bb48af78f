"""Speed of hkjit's CDNA simulator on one core: wave-instructions per second running the shipped
GEMM (kernel_sources/gemm_cdna.hip), and the time of a 256x256x256 bf16 GEMM on sim:gfx950.

    python tools/sim_bench.py [--quick]

Needs clang-22 (the GEMM is compiled once and cached). Each figure is the best of --repeat runs;
a launch includes block compilation of the simulator's first run of that kernel object."""

import argparse
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "sim"))
sys.path.insert(0, os.path.join(HERE, ".."))

from gemm_util import run_gemm  # noqa: E402
from hkjit.sim import SimDevice  # noqa: E402


def one(arch, M, N, K, checks, repeat):
    best = None
    dev = SimDevice(arch, checks=checks)
    run_gemm(arch, 64, 64, 64, device=dev)          # builds and caches the code objects
    for _ in range(repeat):
        t = time.perf_counter()
        c, ref, k = run_gemm(arch, M, N, K, device=dev)
        dt = time.perf_counter() - t
        err = float(np.abs(c - ref).max())
        if best is None or dt < best[0]:
            best = (dt, k.wave_instructions, err)
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="smaller grid for the throughput figure")
    a = ap.parse_args()
    big = (512, 512, 256) if a.quick else (1024, 1024, 256)
    print(f"{'case':44s} {'checks':>6s} {'time s':>8s} {'wave-inst':>10s} {'wave-inst/s':>12s} {'max err':>9s}")
    for arch, shape in (("gfx950", (256, 256, 256)), ("gfx942", (256, 256, 256)),
                        ("gfx950", big), ("gfx942", big)):
        for checks in (True, False):
            dt, wi, err = one(arch, *shape, checks, a.repeat)
            name = f"sim:{arch} bf16 GEMM {shape[0]}x{shape[1]}x{shape[2]}"
            print(f"{name:44s} {str(checks):>6s} {dt:8.3f} {wi:10d} {wi / dt:12,.0f} {err:9.2e}")


if __name__ == "__main__":
    main()
