"""References of attention (GQA, bottom-right causal, rows with no key: O = 0, LSE = -inf): float64
NumPy for the simulator tests, float32 torch on the GPU for the GPU tests."""

import numpy as np


def _scores(q, k, v, causal, scale):
    """float64 q, KV repeated per query head, masked scaled scores, row maxima (0 for rows with
    no key) and row sums of exp(s - m): what the forward and backward references share."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    nq, nk, group = q.shape[1], k.shape[1], q.shape[0] // k.shape[0]
    kr, vr = np.repeat(k, group, axis=0), np.repeat(v, group, axis=0)
    s = scale * q @ kr.transpose(0, 2, 1)
    if causal:
        i, j = np.arange(nq)[:, None], np.arange(nk)[None, :]
        s = np.where(j <= i + nk - nq, s, -np.inf)
    m = s.max(-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    p = np.exp(s - m)
    return q, kr, vr, p, m, p.sum(-1, keepdims=True)


def reference(q, k, v, causal, scale):
    """q (H, Nq, D), k and v (HKV, Nk, D), any float dtype -> (O (H, Nq, D), LSE (H, Nq)) in float64."""
    _, _, vr, p, m, total = _scores(q, k, v, causal, scale)
    seen = total > 0
    o = np.where(seen, (p @ vr) / np.where(seen, total, 1.0), 0.0)
    lse = np.where(seen[..., 0], np.log(np.where(seen[..., 0], total[..., 0], 1.0)) + m[..., 0], -np.inf)
    return o, lse


def reference_backward(q, k, v, do, causal, scale):
    """float64 (dQ, dK, dV) for q, do (H, Nq, D), k, v (HKV, Nk, D); GQA gradients summed per KV head."""
    q, kr, vr, p, _, total = _scores(q, k, v, causal, scale)
    do = np.asarray(do, dtype=np.float64)
    p = np.where(total > 0, p / np.where(total > 0, total, 1.0), 0.0)
    o = p @ vr
    dv = p.transpose(0, 2, 1) @ do
    dp = do @ vr.transpose(0, 2, 1)
    ds = p * (dp - (do * o).sum(-1, keepdims=True))
    dq = scale * ds @ kr
    dk = scale * ds.transpose(0, 2, 1) @ q
    kv_heads, group, nk = np.shape(k)[0], q.shape[0] // np.shape(k)[0], kr.shape[1]
    fold = lambda x: x.reshape(kv_heads, group, nk, -1).sum(1)  # noqa: E731
    return dq, fold(dk), fold(dv)


def torch_reference(q, k, v, causal, scale):
    """float32 O and LSE from (B, H, N, D) torch tensors on any device, GQA by repeating KV heads."""
    import torch
    group = q.shape[1] // k.shape[1]
    k, v = (x.float().repeat_interleave(group, dim=1) for x in (k, v))
    s = scale * q.float() @ k.transpose(-1, -2)
    nq, nk = q.shape[2], k.shape[2]
    if causal:
        i = torch.arange(nq, device=q.device)[:, None]
        j = torch.arange(nk, device=q.device)[None, :]
        s = s.masked_fill(j > i + nk - nq, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - torch.where(torch.isfinite(lse), lse, 0.0)[..., None])
    return p @ v, lse


def check_torch(o, lse, ref_o, ref_lse, what):
    """hkjit's bf16/fp16 O and fp32 LSE against torch_reference: no NaN (unwritten), O within 1e-2
    relative and 0.05 absolute, the same -inf LSE rows, finite LSE within 2e-2."""
    import torch
    assert not torch.isnan(o).any() and not torch.isnan(lse).any(), f"{what}: NaN (unwritten?)"
    rel = (torch.linalg.norm(o.float() - ref_o) / torch.linalg.norm(ref_o)).item()
    assert rel < 1e-2, f"{what}: O relative error {rel:.2e}"
    assert (o.float() - ref_o).abs().max().item() < 0.05, what
    assert torch.equal(torch.isneginf(lse), torch.isneginf(ref_lse)), f"{what}: -inf LSE rows differ"
    fin = torch.isfinite(ref_lse)
    assert (lse[fin] - ref_lse[fin]).abs().max().item() < 2e-2, f"{what}: LSE error"


def torch_reference_backward(q, k, v, do, causal, scale):
    """float32 (dQ, dK, dV) from (B, H, N, D) torch tensors by the explicit formulas (no autograd:
    rows that see no key give 0, not NaN); GQA gradients summed over each KV head's query heads."""
    import torch
    b, heads, nq, d = q.shape
    hkv, nk = k.shape[1], k.shape[2]
    group = heads // hkv
    qf, dof = q.float(), do.float()
    kr, vr = (x.float().repeat_interleave(group, dim=1) for x in (k, v))
    s = scale * qf @ kr.transpose(-1, -2)
    if causal:
        i = torch.arange(nq, device=q.device)[:, None]
        j = torch.arange(nk, device=q.device)[None, :]
        s = s.masked_fill(j > i + nk - nq, float("-inf"))
    m = s.amax(-1, keepdim=True)
    p = torch.exp(s - torch.where(torch.isfinite(m), m, 0.0))
    total = p.sum(-1, keepdim=True)
    p = torch.where(total > 0, p / total.clamp_min(1e-30), 0.0)
    o = p @ vr
    dv = p.transpose(-1, -2) @ dof
    ds = p * (dof @ vr.transpose(-1, -2) - (dof * o).sum(-1, keepdim=True))
    dq = scale * ds @ kr
    dk = scale * ds.transpose(-1, -2) @ qf
    fold = lambda x: x.reshape(b, hkv, group, nk, d).sum(2)  # noqa: E731
    return dq, fold(dk), fold(dv)


def check_grads(grads, refs, what, tol=1e-2, floor=1e-3):
    """hkjit's dQ, dK, dV against references: no NaN (unwritten), each within `tol` relative (norm).
    Gradients that vanish (a sequence of one key: softmax over one score is constant, dQ = dK = 0)
    are rounding noise on both sides: there the bound is tol x an RMS of `floor` per element."""
    import torch
    for name, g, r in zip(("dq", "dk", "dv"), grads, refs):
        assert not torch.isnan(g).any(), f"{what} {name}: NaN (unwritten?)"
        norm = torch.linalg.norm(r.float()).item()
        err = torch.linalg.norm(g.float() - r.float()).item()
        bound = tol * max(norm, floor * r.numel() ** 0.5)
        assert err <= bound, f"{what} {name}: error {err:.2e}, reference norm {norm:.2e} (bound {bound:.2e})"


def varlen_inputs(d, heads=6, kv_heads=2):
    """Packed varlen q, k, v (bf16 on the GPU) with ragged lengths 1..4097, N_q != N_k within a
    sequence, and their int32 cu_seqlens: (lq, lk, cq, ck, q, k, v)."""
    import torch
    lq, lk = [1, 4097, 300, 64, 1000, 7], [5, 4097, 17, 64, 2000, 1]
    cq = torch.tensor([0] + list(torch.tensor(lq).cumsum(0)), dtype=torch.int32, device="cuda")
    ck = torch.tensor([0] + list(torch.tensor(lk).cumsum(0)), dtype=torch.int32, device="cuda")
    q = torch.randn(sum(lq), heads, d, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(sum(lk), kv_heads, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    return lq, lk, cq, ck, q, k, v


def varlen_sequence(x, rows):
    """Sequence `rows` (a slice of the packed rows) of packed (total, H, D) as (1, H, n, D)."""
    return x[rows].transpose(0, 1)[None]
