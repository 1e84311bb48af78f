"""Schedules of hkjit.causal_conv1d side by side on a CUDA GPU: GB/s (the
fewest bytes each call must move) and the fraction of a 1 GiB device-to-device copy, each variant
checked against the default schedule's result first (bit for bit: every schedule does the same
arithmetic), and the fraction of a copy moving the same bytes. What the per-shape defaults in
hkjit/ops/causal_conv1d.py were chosen from. (A call with tile overrides takes the launch path's
slow route, so shapes whose kernels run for a few microseconds measure the host, not the kernel.)

    python tools/causal_conv1d_sweep.py [--quick] [--layout bdl|bld]
"""
import argparse

import torch

import hkjit
from hkjit.bench.memory_bound import copy_bandwidth, same_size_copy
from hkjit.bench.timing import median_ms

L2_ROTATE_BYTES = 256 << 20

CONV = {   # (batch, dim, len, layout): tile overrides to try besides the default
    (8, 4096, 2048, "bdl"): [dict(chunks=2), dict(chunks=2, threads=256), dict(threads=256), dict(stages=2, chunks=2)],
    (64, 2048, 512, "bdl"): [dict(chunks=2), dict(chunks=2, threads=256), dict(threads=256)],
    (4, 8192, 4096, "bdl"): [dict(chunks=2), dict(chunks=2, threads=256), dict(stages=2, chunks=2)],
    # channel-last: direct=1 walks a pointer through whole steps (no per-access bounds checks, 64-bit
    # row products or branches: about half the instructions a byte, docs/notes/causal_conv1d.md)
    (8, 4096, 2048, "bld"): [dict(direct=1), dict(direct=1, seg_len=64), dict(direct=1, seg_len=128),
                             dict(direct=1, seg_len=256), dict(direct=1, seg_len=128, threads=128, min_blocks=8),
                             dict(direct=1, seg_len=128, stages=1), dict(direct=1, seg_len=64, min_blocks=4),
                             dict(direct=1, seg_len=128, chunks=4),
                             # docs/notes/causal_conv1d.md's aliasing hypothesis: segments that do not start on
                             # a power of two of time strides (against seg_len=256 above; no kernel change)
                             dict(direct=1, seg_len=264), dict(direct=1, seg_len=272), dict(direct=1, seg_len=248)],
    (4, 8192, 4096, "bld"): [dict(direct=1), dict(direct=1, seg_len=128), dict(direct=1, seg_len=256),
                             dict(direct=1, seg_len=128, threads=128, min_blocks=8)],
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
    ap.add_argument("--layout", choices=("bdl", "bld"), help="only the cases of this layout")
    args = ap.parse_args()
    peak = copy_bandwidth(torch)
    print(f"device-to-device copy: {peak:.0f} GB/s")
    rows = []
    cases = [(k, v) for k, v in CONV.items() if args.layout in (None, k[3])]
    for (b, d, n, layout), variants in cases[:2 if args.quick else None]:
        nbytes = 2 * (2 * b * d * n + 5 * d)
        same = same_size_copy(torch, nbytes)
        sets = [conv_inputs(b, d, n, layout) for _ in range(max(1, min(8, L2_ROTATE_BYTES // nbytes)))]
        ref = hkjit.causal_conv1d(*sets[0], activation="silu")
        for tiles in [{}] + variants:
            out = hkjit.causal_conv1d(*sets[0], activation="silu", **tiles)
            ok = torch.equal(out, ref)
            ms = timed(lambda x, w, bb: hkjit.causal_conv1d(x, w, bb, activation="silu", **tiles), sets)
            rows.append((f"conv {b}x{d}x{n} {layout}", tiles or "default", nbytes / ms / 1e6, same, ok))
        sets.clear()
    print(f"\n{'case':28s} {'schedule':58s} {'GB/s':>7s} {'% copy':>7s} {'% same-size':>12s}")
    for case, tiles, gbs, same, ok in rows:
        print(f"{case:28s} {str(tiles):58s} {gbs:7.0f} {gbs / peak:7.0%} {gbs / same:12.0%}"
              + ("" if ok else "  DIFFERS"))


if __name__ == "__main__":
    main()
