"""Dev harness for the sm_90a attention forward (kernel_sources/attention_fwd_hopper.cuh) on an
H100/H200: time hkjit.attention with tile variants beside torch SDPA's cuDNN and flash backends,
same inputs, one process; each variant's output is also compared with SDPA flash's.

    PYTHONPATH=. python3 tools/attention_fwd_dev.py                      # default shapes and variants
    PYTHONPATH=. python3 tools/attention_fwd_dev.py --shapes 16,16,16,8192,128,1 --variants "{};{'pingpong':0}"
    PYTHONPATH=. python3 tools/attention_fwd_dev.py --once 16,16,16,8192,128,0   # one call each (for ncu)

A shape is batch,heads,kv_heads,n,head_dim,causal. TFLOP/s count the forward's 4·B·H·N²·D
(halved when causal); times are medians (hkjit.bench.timing.median_ms). The default variants are
the defaults ({}) and the grid of the prepared switches at D128: overlap 0/1 x producer
"lsu"/"tma"/"cpasync" x (stages 3 or 4 at block_kv 64, stages 3 at block_kv 128; 4 stages of 128
keys exceed shared memory at D128).
"""
from __future__ import annotations

import os
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
          f"{'/flash':>6} {'/best':>6} {'rel diff':>8}", flush=True)
    for b, h, hkv, n, d, c in shapes:
        causal = bool(c)
        q, k, v = inputs(torch, b, h, hkv, n, d)
        flops = 4.0 * b * h * n * n * d / (2 if causal else 1)
        peer_tf = {name: flops / median_ms(lambda: fn(q, k, v, causal)) / 1e9 for name, fn in peers.items()}
        ref = peers["SDPA flash"](q, k, v, causal).float()
        cu, fl = peer_tf["SDPA cuDNN"], peer_tf["SDPA flash"]
        label = f"B{b} H{h}/{hkv} N{n} D{d} {'causal' if causal else 'full'}"
        for tiles in variants:
            try:
                out = torch.full_like(q, float("nan"))
                hkjit.attention(q, k, v, causal=causal, out=out, **tiles)
                rel = ((out.float() - ref).norm() / ref.norm()).item()
                ms = median_ms(lambda: hkjit.attention(q, k, v, causal=causal, out=out, **tiles))
                tf = flops / ms / 1e9
                print(f"{label:<26} {str(tiles):<66} {ms:7.3f} {tf:8.1f} {cu:6.0f} {fl:6.0f} {tf / cu:6.2f} "
                      f"{tf / fl:6.2f} {tf / max(cu, fl):6.2f} {rel:8.1e}", flush=True)
            except Exception as e:   # a refused variant (e.g. shared memory) must not stop the rest
                print(f"{label:<26} {str(tiles):<66} {type(e).__name__}: {str(e)[:120]}", flush=True)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
