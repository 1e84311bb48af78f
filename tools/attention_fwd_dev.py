"""Dev harness for the sm_90a attention forward (kernel_sources/attention_fwd_hopper.cuh) on an
H100/H200: time hkjit.attention with tile variants beside torch SDPA's cuDNN and flash backends,
same inputs, one process; each variant's output is also compared with SDPA flash's.

    PYTHONPATH=. python3 tools/attention_fwd_dev.py                      # default shapes and variants
    PYTHONPATH=. python3 tools/attention_fwd_dev.py --shapes 16,16,16,8192,128,1 --variants "{};{'pingpong':0}"
    PYTHONPATH=. python3 tools/attention_fwd_dev.py --once 16,16,16,8192,128,0   # one call each (for ncu)

A shape is batch,heads,kv_heads,n,head_dim,causal. TFLOP/s count the forward's 4·B·H·N²·D
(halved when causal); times are medians (hkjit.bench.timing.median_ms), over ROUNDS (environment,
default 1) rounds that interleave variants and peers; spread is (max - min) / median over the rounds.
The default variants are the defaults ({}) and the grid of the prepared switches at D128: overlap 0/1 x producer
"lsu"/"tma"/"cpasync" x (stages 3 or 4 at block_kv 64, stages 3 at block_kv 128; 4 stages of 128
keys exceed shared memory at D128).
"""
from __future__ import annotations

import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from _attention_dev import command_line, inputs  # noqa: E402

SHAPES = [f"16,{h},{kv},{n},{d},{c}" for h, kv in ((16, 16), (64, 8)) for n in (2048, 4096, 8192)
          for d in (64, 128) for c in (0, 1)]
GRID = [dict(overlap=ov, producer=pr, block_kv=kv, stages=st) for ov in (0, 1) for pr in ("lsu", "tma", "cpasync")
        for kv, st in ((64, 3), (64, 4), (128, 3))]
VARIANTS = ";".join(["{}"] + [str(v) for v in GRID if v != dict(overlap=0, producer="lsu", block_kv=128, stages=3)])


def main():
    shapes, variants, once = command_line(__doc__, SHAPES, VARIANTS)
    rounds = int(os.environ.get("ROUNDS", "1"))
    import torch
    import hkjit
    from hkjit.bench.attention import _sdpa_peers
    from hkjit.bench.timing import median_ms

    if once:
        b, h, hkv, n, d, c = once
        q, k, v = inputs(torch, b, h, hkv, n, d)
        hkjit.attention(q, k, v, causal=bool(c), **variants[0])
        torch.cuda.synchronize()
        return
    peers = _sdpa_peers(torch)
    print(f"{'shape':<26} {'variant':<66} {'ms':>7} {'TFLOP/s':>8} {'cuDNN':>6} {'flash':>6} {'/cuDNN':>6} "
          f"{'/flash':>6} {'/best':>6} {'rel diff':>8} {'spread':>6}", flush=True)
    for b, h, hkv, n, d, c in shapes:
        causal = bool(c)
        q, k, v = inputs(torch, b, h, hkv, n, d)
        flops = 4.0 * b * h * n * n * d / (2 if causal else 1)
        ref = peers["SDPA flash"](q, k, v, causal).float()
        label = f"B{b} H{h}/{hkv} N{n} D{d} {'causal' if causal else 'full'}"
        rel, failed, times = {}, {}, {}
        for tiles in variants:   # checked once, before anything is timed
            try:
                out = torch.full_like(q, float("nan"))
                hkjit.attention(q, k, v, causal=causal, out=out, **tiles)
                rel[str(tiles)] = ((out.float() - ref).norm() / ref.norm()).item()
            except Exception as e:   # a refused variant (e.g. shared memory) must not stop the rest
                failed[str(tiles)] = f"{type(e).__name__}: {str(e)[:120]}"
        # rounds interleave the variants and the peers, so a drift of the clocks over the shape's
        # minutes falls on all of them alike; each figure is the median over the rounds
        for _ in range(rounds):
            for name, fn in peers.items():
                times.setdefault(name, []).append(median_ms(lambda: fn(q, k, v, causal)))
            for tiles in variants:
                if str(tiles) not in failed:
                    times.setdefault(str(tiles), []).append(
                        median_ms(lambda: hkjit.attention(q, k, v, causal=causal, out=out, **tiles)))
        tf = {key: flops / statistics.median(ms) / 1e9 for key, ms in times.items()}
        cu, fl = tf["SDPA cuDNN"], tf["SDPA flash"]
        for tiles in variants:
            key = str(tiles)
            if key in failed:
                print(f"{label:<26} {key:<66} {failed[key]}", flush=True)
                continue
            spread = (max(times[key]) - min(times[key])) / statistics.median(times[key])
            print(f"{label:<26} {key:<66} {statistics.median(times[key]):7.3f} {tf[key]:8.1f} {cu:6.0f} {fl:6.0f} "
                  f"{tf[key] / cu:6.2f} {tf[key] / fl:6.2f} {tf[key] / max(cu, fl):6.2f} {rel[key]:8.1e} "
                  f"{spread:6.1%}", flush=True)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
