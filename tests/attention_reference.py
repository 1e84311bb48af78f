"""Float64 NumPy reference of attention (GQA, bottom-right causal, rows with no key: O = 0, LSE = -inf)."""

import numpy as np


def reference(q, k, v, causal, scale):
    """q (H, Nq, D), k and v (HKV, Nk, D), any float dtype -> (O (H, Nq, D), LSE (H, Nq)) in float64."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    heads, nq, _ = q.shape
    group = heads // k.shape[0]
    k, v = np.repeat(k, group, axis=0), np.repeat(v, group, axis=0)
    nk = k.shape[1]
    s = scale * q @ k.transpose(0, 2, 1)
    if causal:
        i, j = np.arange(nq)[:, None], np.arange(nk)[None, :]
        s = np.where(j <= i + nk - nq, s, -np.inf)
    m = s.max(-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    p = np.exp(s - m)
    total = p.sum(-1, keepdims=True)
    seen = total > 0
    o = np.where(seen, (p @ v) / np.where(seen, total, 1.0), 0.0)
    lse = np.where(seen[..., 0], np.log(np.where(seen[..., 0], total[..., 0], 1.0)) + m[..., 0], -np.inf)
    return o, lse


def reference_backward(q, k, v, do, causal, scale):
    """float64 (dQ, dK, dV) for q, do (H, Nq, D), k, v (HKV, Nk, D); GQA gradients summed per KV head."""
    q, k, v, do = (np.asarray(x, dtype=np.float64) for x in (q, k, v, do))
    heads, nq, _ = q.shape
    group = heads // k.shape[0]
    kr, vr = np.repeat(k, group, axis=0), np.repeat(v, group, axis=0)
    nk = kr.shape[1]
    s = scale * q @ kr.transpose(0, 2, 1)
    if causal:
        i, j = np.arange(nq)[:, None], np.arange(nk)[None, :]
        s = np.where(j <= i + nk - nq, s, -np.inf)
    m = s.max(-1, keepdims=True)
    p = np.exp(s - np.where(np.isfinite(m), m, 0.0))
    total = p.sum(-1, keepdims=True)
    p = np.where(total > 0, p / np.where(total > 0, total, 1.0), 0.0)
    o = p @ vr
    dv = p.transpose(0, 2, 1) @ do
    dp = do @ vr.transpose(0, 2, 1)
    ds = p * (dp - (do * o).sum(-1, keepdims=True))
    dq = scale * ds @ kr
    dk = scale * ds.transpose(0, 2, 1) @ q
    fold = lambda x: x.reshape(k.shape[0], group, nk, -1).sum(1)  # noqa: E731
    return dq, fold(dk), fold(dv)
