"""What the two attention dev harnesses (attention_fwd_dev.py, attention_bwd_dev.py) share: their
command line and their random bf16 inputs."""
from __future__ import annotations

import argparse
import ast


def _shape(text: str) -> tuple:
    return tuple(int(x) for x in text.split(","))


def command_line(doc: str, shapes: list[str], variants: str):
    """(shapes, variants, once): shapes as (batch, heads, kv_heads, n, head_dim, causal) tuples,
    variants as tile dicts, once a shape for a single call of the first variant (for ncu) or None."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--shapes", default=";".join(shapes), help="batch,heads,kv_heads,n,head_dim,causal;...")
    ap.add_argument("--variants", default=variants, help="tile dicts separated by ';', e.g. \"{};{'stages':3}\"")
    ap.add_argument("--once", default=None, help="one shape: one call of the first variant, nothing timed")
    args = ap.parse_args()
    return ([_shape(s) for s in args.shapes.split(";")], [ast.literal_eval(v) for v in args.variants.split(";")],
            _shape(args.once) if args.once else None)


def inputs(torch, b, h, hkv, n, d):
    """q (b, h, n, d), k and v (b, hkv, n, d): standard normal bf16 on the current CUDA device."""
    q = torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(b, hkv, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    return q, k, v
