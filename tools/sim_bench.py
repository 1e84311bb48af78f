"""Speed of hkjit's CDNA simulator on one core: wave-instructions per second running the shipped
GEMM (kernel_sources/gemm_cdna.hip) and a flash-attention forward written the way outside kernels
are (tests/sim/kernels/attention.hip), with hazard checks on and off.

    python tools/sim_bench.py [--quick] [--repeat N]

Needs clang-22 (the kernels are compiled once and cached). Each figure is the best of --repeat
launches after a warm-up one, timed around SimKernel.launch: every launch is of a freshly loaded
code object, so the time includes the simulator's decoding and block compilation, but not the
host's data set-up, copies or reference computation."""

import argparse
import os
import platform
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "sim"))
sys.path.insert(0, os.path.join(HERE, ".."))

from attention_util import run_attention  # noqa: E402
from gemm_util import run_gemm  # noqa: E402
from hkjit.sim import SimDevice, SimKernel  # noqa: E402

_launch = SimKernel.launch


def timed_launch(self, *args, **kw):
    """SimKernel.launch, timed: the simulator's own time, not the host set-up around it."""
    t = time.perf_counter()
    try:
        return _launch(self, *args, **kw)
    finally:
        self.bench_seconds = time.perf_counter() - t


SimKernel.launch = timed_launch


def best(fn, repeat):
    fn()                                     # warm-up
    out = None
    for _ in range(repeat):
        c, ref, k = fn()
        err = float(np.nanmax(np.abs(c - ref) / (1 + np.abs(ref))))
        if out is None or k.bench_seconds < out[0]:
            out = (k.bench_seconds, k, err)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="smaller grids")
    a = ap.parse_args()
    big = (512, 512, 256) if a.quick else (1024, 1024, 256)
    heads, n = (4, 256) if a.quick else (8, 512)
    print(f"# {platform.machine()} {platform.processor() or ''}, {os.cpu_count()} cores, one used; numpy {np.__version__}")
    print(f"{'case':44s} {'checks':>6s} {'time s':>8s} {'wave-inst':>10s} {'wave-inst/s':>12s} {'rel err':>9s}")
    cases = []
    for arch in ("gfx950", "gfx942"):
        for shape in ((256, 256, 256), big):
            cases.append((f"sim:{arch} bf16 GEMM {'x'.join(map(str, shape))}", arch,
                          lambda dev, arch=arch, shape=shape: run_gemm(arch, *shape, device=dev)))
        cases.append((f"sim:{arch} attention {heads}x{n}x64", arch,
                      lambda dev, arch=arch: run_attention(arch, heads, n, device=dev)))
    for name, arch, fn in cases:
        for checks in (True, False):
            dev = SimDevice(arch, checks=checks)
            dt, k, err = best(lambda: fn(dev), a.repeat)
            wi = k.wave_instructions
            print(f"{name:44s} {str(checks):>6s} {dt:8.3f} {wi:10d} {wi / dt:12,.0f} {err:9.1e}")


if __name__ == "__main__":
    main()
