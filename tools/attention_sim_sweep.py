"""A wider sweep of the attention backward on the CDNA simulator than CI affords: every pair of
gfx942/gfx950, D64/D128, causal/full and (n_q, n_k) in 1x1, 33x129, 129x33, 257x300, 300x257, GQA
H4/HKV2, bf16, gradients NaN-poisoned first; prints each gradient's relative error against the
float64 reference of tests/attention_reference.py (a few minutes on one core).

    PYTHONPATH=. python3 tools/attention_sim_sweep.py [--seed N]

At 1x1 the reference dQ and dK are exactly 0 (one key: P = 1 and dP = Delta), so their relative
error is meaningless there; the sweep prints their largest magnitude instead.
"""
from __future__ import annotations

import argparse
import itertools
import os
import sys

import numpy as np

ROOT = os.path.join(os.path.dirname(__file__), "..")
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]

import hkjit  # noqa: E402
import ml_dtypes  # noqa: E402
from attention_reference import reference_backward  # noqa: E402

SIZES = ((1, 1), (33, 129), (129, 33), (257, 300), (300, 257))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=None, help="default: fresh entropy (printed)")
    args = ap.parse_args()
    seed = np.random.SeedSequence(args.seed).entropy
    gen = np.random.default_rng(seed)
    bf = ml_dtypes.bfloat16
    print(f"seed {seed}; relative errors dQ dK dV")
    failed = 0
    for arch, d, causal, (nq, nk) in itertools.product(("gfx942", "gfx950"), (64, 128), (False, True), SIZES):
        q, do = (gen.standard_normal((1, 4, nq, d)).astype(bf) for _ in range(2))
        k, v = (gen.standard_normal((1, 2, nk, d)).astype(bf) for _ in range(2))
        dev = f"sim:{arch}"
        o, lse = hkjit.attention(q, k, v, causal=causal, return_lse=True, device=dev)
        grads = [np.full(x.shape, np.nan, bf) for x in (q, k, v)]
        hkjit.attention_backward(do, q, k, v, o, lse, causal=causal, dq=grads[0], dk=grads[1], dv=grads[2],
                                 device=dev)
        cells, ok = [], True
        for g, r in zip(grads, reference_backward(q[0], k[0], v[0], do[0], causal, 1 / np.sqrt(d))):
            g = np.asarray(g[0], np.float64)
            if np.isnan(g).any():
                cells.append("NaN"); ok = False
            elif not r.any():
                cells.append(f"|g|<={np.abs(g).max():.1e}"); ok &= np.abs(g).max() < 1e-4 * np.abs(v).max()
            else:
                e = np.linalg.norm(g - r) / np.linalg.norm(r)
                cells.append(f"{e:.2e}"); ok &= e < 1e-2
        failed += not ok
        print(f"{arch} D{d} {'causal' if causal else 'full':6} {nq}x{nk}: {' '.join(cells)}{'' if ok else '  FAILED'}",
              flush=True)
    print(f"{failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
