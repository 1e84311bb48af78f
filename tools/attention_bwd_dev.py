"""Dev harness for the sm_90a attention backward (kernel_sources/attention_bwd_hopper.cuh) on an
H100/H200: time hkjit.attention_backward and each of its two launches (prep, one-pass dkdv), with tile variants, beside
torch SDPA's cuDNN and flash backward in one process.

    PYTHONPATH=. python3 tools/attention_bwd_dev.py                      # default shapes and variants
    PYTHONPATH=. python3 tools/attention_bwd_dev.py --shapes 16,16,16,4096,64,1 --variants "{};{'dkdv_stages':3}"
    PYTHONPATH=. python3 tools/attention_bwd_dev.py --variants "{};{'dkdv_producer':'cpasync'};{'dkdv_consumer':3}"
    PYTHONPATH=. python3 tools/attention_bwd_dev.py --once 16,16,16,8192,128,0   # one call each (for ncu)

A shape is batch,heads,kv_heads,n,head_dim,causal. TFLOP/s use 2.5x the forward's FLOPs
(4·B·H·N²·D, halved when causal), FlashAttention's convention for the backward.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from _attention_dev import command_line, inputs  # noqa: E402

SHAPES = [f"16,16,16,{n},{d},{c}" for n in (2048, 4096, 8192) for d in (64, 128) for c in (0, 1)] + \
    ["16,64,8,4096,128,1"]
# today's kernel (the TMA producer where it serves; at D64 block_q=128 with dkdv_consumer 10), then its
# consumer variants (hkjit/ops/_hopper_attention_bwd.py: 1 wait placement, 5 with dV issued before the dP
# wait, 2 stmatrix dS^T, 3 and 7 both; at D64 they need block_q=64, and + 8: dQ by key halves, e.g. 10)
VARIANTS = "{};{'block_q':64};{'dkdv_consumer':1};{'dkdv_consumer':5};{'dkdv_consumer':2};{'dkdv_consumer':3};" \
    "{'dkdv_consumer':7}"


def kernels(q, k, v, o, lse, do, causal, tiles):
    """The two launches of attention_backward, separately callable (for per-kernel times)."""
    from hkjit import launch
    from hkjit.ops.attention import prepare_call
    from hkjit.ops.attention_backward import ARRAYS, DKDV_OP, DQ_OP
    options, scale = prepare_call(q, k, causal, None, "bhnd", True, None, None, None, None)
    pick = lambda op: {n: x for n, x in tiles.items() if n in op.tile_keywords}  # noqa: E731
    a = dict(q=q, k=k, v=v, out=o, grad_out=do, lse=lse, delta=None, dq=None, dk=None, dv=None, cu_seqlens_q=None,
             cu_seqlens_k=None)
    dq, delta = launch.call(DQ_OP, tuple(a[n] for n in ARRAYS), (scale,), options, None, None, pick(DQ_OP))
    b = dict(a, out=None, delta=delta, dq=dq)      # sm_90a: the dkdv kernel writes dq (one pass)
    return (lambda: launch.call(DQ_OP, tuple(a[n] for n in ARRAYS), (scale,), options, None, None, pick(DQ_OP)),
            lambda: launch.call(DKDV_OP, tuple(b[n] for n in ARRAYS), (scale,), options, None, None, pick(DKDV_OP)))


def main():
    shapes, variants, once = command_line(__doc__, SHAPES, VARIANTS)
    import torch
    import hkjit
    from hkjit.bench.attention import _sdpa_peers
    from hkjit.bench.timing import median_ms

    if once:
        b, h, hkv, n, d, c = once
        q, k, v = inputs(torch, b, h, hkv, n, d)
        o, lse = hkjit.attention(q, k, v, causal=bool(c), return_lse=True)
        hkjit.attention_backward(torch.randn_like(q), q, k, v, o, lse, causal=bool(c), **variants[0])
        torch.cuda.synchronize()
        return
    peers = _sdpa_peers(torch)
    print(f"{'shape':<28} {'variant':<40} {'total':>7} {'dq ms':>7} {'dkdv ms':>7} {'TFLOP/s':>8}  vs peers")
    for b, h, hkv, n, d, c in shapes:
        causal = bool(c)
        q, k, v = inputs(torch, b, h, hkv, n, d)
        do = torch.randn_like(q)
        o, lse = hkjit.attention(q, k, v, causal=causal, return_lse=True)
        flops = 2.5 * 4.0 * b * h * n * n * d / (2 if causal else 1)
        peer_tf = {}
        for name, fn in peers.items():
            qg, kg, vg = (x.detach().requires_grad_() for x in (q, k, v))
            out = fn(qg, kg, vg, causal)
            ms = median_ms(lambda out=out: torch.autograd.grad(out, (qg, kg, vg), do, retain_graph=True))
            peer_tf[name] = flops / ms / 1e9
        label = f"B{b} H{h}/{hkv} N{n} D{d} {'causal' if causal else 'full'}"
        for tiles in variants:
            try:
                ms = median_ms(lambda: hkjit.attention_backward(do, q, k, v, o, lse, causal=causal, **tiles))
                f_dq, f_dkdv = kernels(q, k, v, o, lse, do, causal, tiles)
                ms_dq, ms_dkdv = median_ms(f_dq), median_ms(f_dkdv)
                tf = flops / ms / 1e9
                print(f"{label:<28} {str(tiles):<40} {ms:7.3f} {ms_dq:7.3f} {ms_dkdv:7.3f} {tf:8.1f}  " +
                      "  ".join(f"{p} {t:.1f} ({tf / t:.2f}x)" for p, t in peer_tf.items()), flush=True)
            except Exception as e:   # a refused variant (e.g. shared memory) must not stop the rest
                print(f"{label:<28} {str(tiles):<40} {type(e).__name__}: {str(e)[:120]}", flush=True)
        q = k = v = do = o = lse = None   # free this shape's tensors before the next one's
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
