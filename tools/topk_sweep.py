"""Schedules of hkjit.topk side by side on a CUDA GPU: GB/s (the bytes each call must move: x read
once, values and int64 indices written) and the fraction of a 1 GiB device-to-device copy, each
variant checked against torch.topk first (values bit-exact, indices pointing at them), and torch.compile's topk
timed in the same process. What the streamed-row constants of hkjit/ops/topk.py are to be chosen
from (docs/notes/topk.md). A call with tile overrides takes the launch path's slow route, so
shapes whose kernels run for a few microseconds measure the host, not the kernel.

    python tools/topk_sweep.py [--quick]
"""
import argparse

import torch

import hkjit
import hkjit.errors
from hkjit.bench.memory_bound import copy_bandwidth
from hkjit.bench.timing import median_ms

L2_ROTATE_BYTES = 256 << 20

TOPK = {   # (rows, n, k, dtype): tile overrides to try besides the default (spread=1: candidates ranked by lane groups)
    (16384, 4096, 32, torch.float32): [dict(spread=1), dict(threads=512, chunks=2, prefetch=1),
                                       dict(threads=512, chunks=2), dict(prefetch=1, rows_per_block=4)],
    (16384, 4096, 32, torch.bfloat16): [dict(spread=1), dict(threads=128, chunks=4, min_blocks=8),
                                        dict(threads=128, chunks=4, min_blocks=8, prefetch=1)],
    (16384, 8192, 32, torch.float32): [dict(spread=1), dict(threads=1024, chunks=2, prefetch=1)],
    (16384, 8192, 32, torch.bfloat16): [dict(spread=1), dict(threads=256, chunks=4, min_blocks=4, prefetch=1)],
    # (spread=1 at the default's 2 blocks an SM spills 68 bytes here, NVRTC 13.5; with 1, 96 registers, none)
    (4096, 16384, 50, torch.float32): [dict(spread=1), dict(spread=1, min_blocks=1)],
}


def same_topk(x, k, v, i, ref_v):
    """Values bit-equal to torch.topk's; indices distinct within each row and pointing at those
    values (which of tied elements torch returns is unspecified; hkjit takes the lower index, which
    the GPU tests check on rows of ties)."""
    if not torch.equal(v, ref_v) or i.dtype != torch.int64:
        return False
    srt = i.sort(dim=-1).values
    return bool((srt[:, 1:] != srt[:, :-1]).all()) and torch.equal(x.gather(-1, i), v)


def timed(fn, sets):
    it = {"i": 0}

    def call():
        fn(sets[it["i"] % len(sets)])
        it["i"] += 1
    return median_ms(call)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    peak = copy_bandwidth(torch)
    print(f"device-to-device copy: {peak:.0f} GB/s")
    rows = []
    for (r, n, k, dt), variants in list(TOPK.items())[:2 if args.quick else None]:
        esize = torch.empty((), dtype=dt).element_size()
        nbytes = r * n * esize + r * k * (esize + 8)
        sets = [torch.randn(r, n, device="cuda", dtype=dt)
                for _ in range(max(1, min(8, L2_ROTATE_BYTES // nbytes)))]
        ref_v = torch.topk(sets[0], k).values
        case = f"{r}x{n} k={k} {str(dt).removeprefix('torch.')}"
        compiled = torch.compile(lambda x, k=k: torch.topk(x, k))
        ms = timed(compiled, sets)
        rows.append((case, "torch.compile", nbytes / ms / 1e6, True))
        for tiles in [{}] + variants:
            try:
                v, i = hkjit.topk(sets[0], k, **tiles)
            except hkjit.errors.HKJitError as e:     # an override this shape refuses: say so, go on
                rows.append((case, f"{tiles} refused: {e}"[:60], 0.0, True))
                continue
            ok = same_topk(sets[0], k, v, i, ref_v)
            ms = timed(lambda x, k=k, tiles=tiles: hkjit.topk(x, k, **tiles), sets)
            rows.append((case, tiles or "default", nbytes / ms / 1e6, ok))
        sets.clear()
    print(f"\n{'case':28s} {'schedule':42s} {'GB/s':>7s} {'% copy':>7s}")
    for case, tiles, gbs, ok in rows:
        print(f"{case:28s} {str(tiles):42s} {gbs:7.0f} {gbs / peak:7.0%}" + ("" if ok else "  DIFFERS"))


if __name__ == "__main__":
    main()
