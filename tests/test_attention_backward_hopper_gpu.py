"""The sm_90a attention backward (hkjit.attention_backward and autograd through hkjit.attention) on a
real Hopper GPU: dQ, dK, dV against a float32 reference and torch SDPA's backward, across the
kernel's configurations (stages, load width, the prepared dq_warp variant with 1-3 load warps);
D64/D128, causal or not, MHA, GQA, MQA, ragged N, N_q != N_k, fp16, varlen with lengths 1..4097;
gradients poisoned (NaN) first;
two runs bit-identical (deterministic). Skipped where no CUDA GPU is present (CI)."""

import math

import pytest

from attention_reference import check_grads, torch_reference_backward, varlen_inputs, varlen_sequence
from conftest import HAVE_GPU

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not HAVE_GPU, reason="no CUDA GPU here")]

import hkjit  # noqa: E402

CASES = [  # (batch, heads, kv_heads, n_q, n_k, head_dim, causal)
    (2, 4, 4, 300, 300, 128, True), (1, 8, 2, 333, 1025, 64, False), (1, 8, 2, 1025, 333, 64, True),
    (2, 4, 1, 1025, 333, 128, False), (1, 6, 3, 200, 513, 128, True), (1, 2, 2, 1, 257, 64, True),
    (1, 4, 1, 4097, 64, 128, True),
]
TILES = [dict(), dict(block_q=64, dkdv_stages=3), dict(dkdv_stages=4),
         dict(dq_warp=1), dict(dq_warp=1, load_warps=1, dkdv_stages=3)]
DQ_WARP = [dict(), dict(dq_warp=1, load_warps=2)]


def _inputs(b, h, hkv, nq, nk, d, dtype="bfloat16"):
    import torch
    dt = getattr(torch, dtype)
    q = torch.randn(b, h, nq, d, device="cuda", dtype=dt)
    k, v = (torch.randn(b, hkv, nk, d, device="cuda", dtype=dt) for _ in range(2))
    return q, k, v, torch.randn_like(q)


def _run(q, k, v, do, causal, **tiles):
    """hkjit's gradients into NaN-filled arrays, then again into fresh ones: both returned."""
    import torch
    o, lse = hkjit.attention(q, k, v, causal=causal, return_lse=True)
    grads = [torch.full_like(x, float("nan")) for x in (q, k, v)]
    hkjit.attention_backward(do, q, k, v, o, lse, causal=causal, dq=grads[0], dk=grads[1], dv=grads[2], **tiles)
    return grads, hkjit.attention_backward(do, q, k, v, o, lse, causal=causal, **tiles)


# head_dim 128 fits 2 stages only (the refusal of more is tested in the static tests)
RUNNABLE = [(case, tiles) for case in CASES for tiles in TILES if case[5] == 64 or tiles.get("dkdv_stages", 2) == 2]


@pytest.mark.parametrize("case,tiles", RUNNABLE, ids=str)
def test_against_float32(case, tiles):
    import torch
    b, h, hkv, nq, nk, d, causal = case
    q, k, v, do = _inputs(b, h, hkv, nq, nk, d)
    grads, again = _run(q, k, v, do, causal, **tiles)
    assert all(torch.equal(g, a) for g, a in zip(grads, again)), "two runs differ: not deterministic"
    check_grads(grads, torch_reference_backward(q, k, v, do, causal, 1 / math.sqrt(d)), f"{case} {tiles}")


@pytest.mark.parametrize("d", [64, 128])
def test_fp16(d):
    import torch
    q, k, v, do = _inputs(2, 4, 2, 700, 450, d, "float16")
    grads, _ = _run(q, k, v, do, False)
    check_grads(grads, torch_reference_backward(q, k, v, do, False, 1 / math.sqrt(d)), f"fp16 D{d}")
    assert grads[0].dtype == torch.float16


@pytest.mark.parametrize("d", [64, 128])
def test_four_byte_aligned_rows(d):
    """Row strides 4- but not 16-byte aligned take the narrow-load specialisation."""
    import torch
    q, k, v, do = (torch.randn(1, 4, 300, d + 2, device="cuda", dtype=torch.bfloat16)[..., :d] for _ in range(4))
    k, v = k[:, :2], v[:, :2]
    grads, _ = _run(q, k, v, do, True)
    check_grads(grads, torch_reference_backward(q, k, v, do, True, 1 / math.sqrt(d)), f"4-byte rows D{d}")


@pytest.mark.parametrize("tiles", DQ_WARP, ids=str)
@pytest.mark.parametrize("d,causal", [(64, False), (128, True)])
def test_varlen_lengths(d, causal, tiles):
    import torch
    lq, lk, cq, ck, q, k, v = varlen_inputs(d)
    do = torch.randn_like(q)
    kw = dict(causal=causal, cu_seqlens_q=cq, cu_seqlens_k=ck)
    o, lse = hkjit.attention(q, k, v, return_lse=True, **kw)
    kw.update(tiles)
    grads = [torch.full_like(x, float("nan")) for x in (q, k, v)]
    hkjit.attention_backward(do, q, k, v, o, lse, dq=grads[0], dk=grads[1], dv=grads[2], **kw)
    again = hkjit.attention_backward(do, q, k, v, o, lse, **kw)
    assert all(torch.equal(g, a) for g, a in zip(grads, again)), "two runs differ: not deterministic"
    for i in range(len(lq)):
        sq, sk = slice(int(cq[i]), int(cq[i + 1])), slice(int(ck[i]), int(ck[i + 1]))
        seq = varlen_sequence
        refs = torch_reference_backward(seq(q, sq), seq(k, sk), seq(v, sk), seq(do, sq), causal, 1 / math.sqrt(d))
        check_grads([seq(grads[0], sq), seq(grads[1], sk), seq(grads[2], sk)], refs, f"varlen sequence {i}")


@pytest.mark.parametrize("causal", [False, True])
def test_autograd_gqa_against_sdpa(causal):
    """loss.backward() through hkjit.attention (GQA, bnhd layout) against SDPA's backward (both bf16)."""
    import torch
    n_k = 384 if causal else 300          # SDPA aligns causal masks top-left: compare at N_q == N_k
    q = torch.randn(2, 384, 8, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k, v = (torch.randn(2, n_k, 2, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(2))
    w = torch.randn(2, 384, 8, 128, device="cuda")
    (hkjit.attention(q, k, v, causal=causal, layout="bnhd").float() * w).sum().backward()
    ours = [x.grad.clone() for x in (q, k, v)]
    for x in (q, k, v):
        x.grad = None
    t = lambda x: x.transpose(1, 2)  # noqa: E731
    out = torch.nn.functional.scaled_dot_product_attention(t(q), t(k), t(v), is_causal=causal, enable_gqa=True)
    (t(out).float() * w).sum().backward()
    check_grads(ours, [x.grad for x in (q, k, v)], f"autograd causal={causal}", tol=2e-2)


def test_host_arrays_give_the_torch_calls_bits():
    """NumPy arrays for the GPU (a staged call: upload, the prep and dK/dV launches, download) give the
    same dq, dk, dv bits as the call on CUDA tensors; dq comes from both launches (rows that see no key
    from the prep, the others from the one-pass dK/dV kernel, which writes dq as an updated input)."""
    import numpy as np
    import torch
    q, k, v, do = _inputs(2, 8, 2, 700, 450, 128, "float16")
    o, lse = hkjit.attention(q, k, v, return_lse=True, causal=True)
    want = hkjit.attention_backward(do, q, k, v, o, lse, causal=True)
    torch.cuda.synchronize()
    got = hkjit.attention_backward(*(x.cpu().numpy() for x in (do, q, k, v, o, lse)), causal=True, device="cuda:0")
    assert all(isinstance(g, np.ndarray) for g in got)
    for name, g, w in zip(("dq", "dk", "dv"), got, want):
        assert np.array_equal(g, w.cpu().numpy()), f"{name} differs from the torch call's"
