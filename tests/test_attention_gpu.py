"""hkjit.attention (forward) on a real NVIDIA Hopper GPU against a float32 reference and torch SDPA:
MHA and GQA, D64/D128, causal and not, Nq != Nk, ragged lengths, both layouts, fp16, LSE, varlen
with lengths 1..4097, outputs poisoned first. Skipped where no CUDA GPU is present (CI)."""

import math

import pytest

from attention_reference import check_torch, torch_reference
from conftest import HAVE_GPU

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not HAVE_GPU, reason="no CUDA GPU here")]

import hkjit  # noqa: E402

CASES = [  # (batch, heads, kv_heads, n_q, n_k, head_dim, causal)
    (2, 4, 4, 256, 256, 128, False), (2, 4, 4, 1000, 1000, 128, True), (1, 8, 2, 333, 1025, 64, False),
    (1, 8, 2, 1025, 333, 64, True), (1, 2, 1, 1, 4097, 128, True), (3, 6, 1, 130, 70, 128, True),
    (1, 16, 16, 4096, 4096, 64, True),
]


@pytest.mark.parametrize("layout", ["bhnd", "bnhd"])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_forward_against_float32(case, layout):
    import torch
    b, h, hkv, nq, nk, d, causal = case
    q = torch.randn(b, h, nq, d, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(b, hkv, nk, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    t = (lambda x: x) if layout == "bhnd" else (lambda x: x.transpose(1, 2))   # a strided view, read in place
    out = torch.full_like(t(q), float("nan"))
    lse = torch.full((b, h, nq), float("nan"), device="cuda")
    hkjit.attention(t(q), t(k), t(v), causal=causal, layout=layout, out=out, lse=lse)
    ref_o, ref_lse = torch_reference(q, k, v, causal, 1 / math.sqrt(d))
    check_torch(t(out), lse, ref_o, ref_lse, f"{case} {layout}")


@pytest.mark.parametrize("causal", [False, True])
def test_against_sdpa_fp16(causal):
    import torch
    q, k, v = (torch.randn(2, 8, 777, 128, device="cuda", dtype=torch.float16) for _ in range(3))
    o = hkjit.attention(q, k, v, causal=causal, scale=0.1)
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=0.1)
    rel = (torch.linalg.norm(o.float() - ref.float()) / torch.linalg.norm(ref.float())).item()
    assert rel < 5e-3, rel


@pytest.mark.parametrize("causal", [False, True])
def test_varlen(causal):
    import torch
    lq, lk = [1, 4097, 300, 64, 1000], [5, 4097, 17, 64, 2000]
    cq = torch.tensor([0] + list(torch.tensor(lq).cumsum(0)), dtype=torch.int32, device="cuda")
    ck = torch.tensor([0] + list(torch.tensor(lk).cumsum(0)), dtype=torch.int32, device="cuda")
    q = torch.randn(sum(lq), 8, 128, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(sum(lk), 2, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    out = torch.full_like(q, float("nan"))
    o, lse = hkjit.attention(q, k, v, causal=causal, cu_seqlens_q=cq, cu_seqlens_k=ck, out=out, return_lse=True)
    for i in range(len(lq)):
        sq, sk = slice(int(cq[i]), int(cq[i + 1])), slice(int(ck[i]), int(ck[i + 1]))
        ref_o, ref_lse = torch_reference(q[sq].transpose(0, 1)[None], k[sk].transpose(0, 1)[None],
                                    v[sk].transpose(0, 1)[None], causal, 1 / math.sqrt(128))
        check_torch(o[sq].transpose(0, 1)[None], lse[:, sq][None], ref_o, ref_lse, f"varlen sequence {i}")


@pytest.mark.parametrize("case", [(2, 4, 4, 300, 300, 128, True), (1, 8, 2, 333, 1025, 64, False),
                                  (1, 8, 2, 1025, 333, 64, True)], ids=str)
def test_backward_against_float32_autograd(case):
    """dQ, dK, dV (GQA sums included) against torch autograd through the float32 reference; two
    runs bit-identical (deterministic)."""
    import torch
    b, h, hkv, nq, nk, d, causal = case
    q = torch.randn(b, h, nq, d, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(b, hkv, nk, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    do = torch.randn_like(q)
    o, lse = hkjit.attention(q, k, v, causal=causal, return_lse=True)
    grads = [torch.full_like(x, float("nan")) for x in (q, k, v)]
    hkjit.attention_backward(do, q, k, v, o, lse, causal=causal, dq=grads[0], dk=grads[1], dv=grads[2])
    again = hkjit.attention_backward(do, q, k, v, o, lse, causal=causal)
    assert all(torch.equal(g, a) for g, a in zip(grads, again)), "not deterministic"
    qf, kf, vf = (x.float().requires_grad_() for x in (q, k, v))
    ref_o, _ = torch_reference(qf, kf, vf, causal, 1 / math.sqrt(d))
    refs = torch.autograd.grad(ref_o, (qf, kf, vf), do.float())
    for name, g, r in zip(("dq", "dk", "dv"), grads, refs):
        rel = (torch.linalg.norm(g.float() - r) / torch.linalg.norm(r)).item()
        assert not torch.isnan(g).any() and rel < 1e-2, f"{case} {name}: relative error {rel:.2e}"


def test_autograd_training_step_against_sdpa():
    import torch
    q, k, v = (torch.randn(2, 8, 512, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    w = torch.randn(2, 8, 512, 128, device="cuda")
    (hkjit.attention(q, k, v, causal=True).float() * w).sum().backward()
    ours = [x.grad.clone() for x in (q, k, v)]
    for x in (q, k, v):
        x.grad = None
    (torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).float() * w).sum().backward()
    for name, g, x in zip(("dq", "dk", "dv"), ours, (q, k, v)):
        rel = (torch.linalg.norm(g.float() - x.grad.float()) / torch.linalg.norm(x.grad.float())).item()
        assert rel < 2e-2, f"{name}: relative difference to SDPA {rel:.2e}"
