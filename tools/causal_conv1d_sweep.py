"""Schedules of hkjit.causal_conv1d side by side on a CUDA GPU: GB/s (the
fewest bytes each call must move) and the fraction of a 1 GiB device-to-device copy, each variant
checked against the default schedule's result first. What the per-shape defaults in
hkjit/ops/causal_conv1d.py were chosen from. (A call with tile overrides takes the launch path's
slow route, so shapes whose kernels run for a few microseconds measure the host, not the kernel.)

    python tools/causal_conv1d_sweep.py [--quick]
"""
import argparse

import torch

import hkjit
from hkjit.bench.memory_bound import copy_bandwidth
from hkjit.bench.timing import median_ms

L2_ROTATE_BYTES = 256 << 20

CONV = {   # (batch, dim, len, layout): tile overrides to try besides the default
    (8, 4096, 2048, "bdl"): [dict(chunks=2), dict(chunks=2, threads=256), dict(threads=256), dict(stages=2, chunks=2)],
    (64, 2048, 512, "bdl"): [dict(chunks=2), dict(chunks=2, threads=256), dict(threads=256)],
    (4, 8192, 4096, "bdl"): [dict(chunks=2), dict(chunks=2, threads=256), dict(stages=2, chunks=2)],
    (8, 4096, 2048, "bld"): [dict(min_blocks=1), dict(stages=1), dict(seg_len=128)],
}


def conv_inputs(b, d, n, layout):
    x = torch.randn(b, d, n, device="cuda", dtype=torch.bfloat16) if layout == "bdl" else \
        torch.randn(b, n, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    w = torch.randn(d, 4, device="cuda", dtype=torch.bfloat16) / 4
    return x, w, torch.randn(d, device="cuda", dtype=torch.bfloat16)


def timed(fn, sets):
    it = {"i": 0}

    def call():
        fn(*sets[it["i"] % len(sets)])
        it["i"] += 1
    return median_ms(call)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    peak = copy_bandwidth(torch)
    print(f"device-to-device copy: {peak:.0f} GB/s")
    rows = []
    for (b, d, n, layout), variants in list(CONV.items())[:2 if args.quick else None]:
        nbytes = 2 * (2 * b * d * n + 5 * d)
        sets = [conv_inputs(b, d, n, layout) for _ in range(max(1, min(8, L2_ROTATE_BYTES // nbytes)))]
        ref = hkjit.causal_conv1d(*sets[0], activation="silu")
        for tiles in [{}] + variants:
            out = hkjit.causal_conv1d(*sets[0], activation="silu", **tiles)
            ok = torch.equal(out, ref)
            ms = timed(lambda x, w, bb: hkjit.causal_conv1d(x, w, bb, activation="silu", **tiles), sets)
            rows.append((f"conv {b}x{d}x{n} {layout}", tiles or "default", nbytes / ms / 1e6, ok))
        sets.clear()
    print(f"\n{'case':28s} {'schedule':42s} {'GB/s':>7s} {'% copy':>7s}")
    for case, tiles, gbs, ok in rows:
        print(f"{case:28s} {str(tiles):42s} {gbs:7.0f} {gbs / peak:7.0%}" + ("" if ok else "  DIFFERS"))


if __name__ == "__main__":
    main()
