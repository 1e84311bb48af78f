"""hkjit.attention_backward (and the torch autograd path) on the CDNA simulator, hazard checks on:
dQ, dK, dV against float64 NumPy gradients on both targets; GQA (H2 / HKV1: dK, dV summed over
the two query heads), MHA batch 2 in the bnhd layout with fp16, D64 / D128, causal and not,
Nq != Nk (causal rows that see no key), ragged lengths, varlen; gradients NaN-poisoned first
(dq=, dk=, dv=); bit-identical on a second run (deterministic); a torch training step on CPU
tensors (autograd through sim:gfx950). Fresh random inputs; the seed is in every message.

Tolerance: |g - ref| <= 2^-7 |ref| + 0.01 max|ref| per element and a relative Frobenius error
< 1e-2 (16-bit inputs, P and dS rounded to 16 bits before their products, 16-bit outputs).
"""

import gc
import os

import numpy as np
import pytest

from attention_reference import reference, reference_backward
from conftest import needs_clang

ml_dtypes = pytest.importorskip("ml_dtypes")
import hkjit  # noqa: E402

pytestmark = needs_clang

ARCHS = ("gfx942", "gfx950")
NP = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16}
# (head_dim, causal, n_q, n_k, batch, heads, kv_heads, layout, dtype)
CASES = [
    (64, True, 300, 300, 1, 2, 1, "bhnd", "bfloat16"),
    (128, True, 200, 37, 1, 2, 1, "bhnd", "bfloat16"),     # 163 queries see no key
    (128, False, 37, 200, 1, 2, 1, "bhnd", "bfloat16"),
    (64, False, 65, 70, 2, 2, 2, "bnhd", "float16"),
    (64, True, 50, 70, 1, 4, 2, "bhnd", "bfloat16"),       # dK, dV of each KV head: its own 2 heads
]
VARLEN = (64, True, (1, 70, 130), (5, 70, 100))


def _requests():
    for arch in ARCHS:
        for d, causal, nq, nk, b, h, hkv, _l, dtype in CASES:
            yield arch, dict(head_dim=d, causal=causal, dtype=dtype, batch=b, heads=h, kv_heads=hkv, n_q=nq, n_k=nk)
        d, causal, lq, lk = VARLEN
        yield arch, dict(head_dim=d, causal=causal, varlen=True, batch=3, heads=2, kv_heads=1, n_q=max(lq),
                         n_k=max(lk))
    yield "gfx950", dict(head_dim=64, causal=True, batch=1, heads=2, kv_heads=1, n_q=50, n_k=60, dtype="float16")


@pytest.fixture(scope="module", autouse=True)
def _private_cache(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HKJIT_CACHE_DIR", str(tmp_path_factory.mktemp("hkjit-cache")))
        hkjit.reset_state()
        from concurrent.futures import ThreadPoolExecutor
        jobs = [(a, op, r) for a, r in _requests() for op in ("attention", "attention_bwd_dq", "attention_bwd_dkdv")]
        with ThreadPoolExecutor(max(2, min(8, os.cpu_count() or 2))) as ex:
            list(ex.map(lambda j: hkjit.build(j[1], target=j[0], **j[2]), jobs))
        yield
        hkjit.reset_state()
        gc.collect()


class _Rng:
    def __init__(self):
        self.seed = np.random.SeedSequence().entropy
        self.gen = np.random.default_rng(self.seed)

    def standard_normal(self, shape):
        return self.gen.standard_normal(shape)


@pytest.fixture
def rng():
    return _Rng()


def _check(got, ref, what):
    got = np.asarray(got, np.float64)
    assert not np.isnan(got).any(), f"{what}: {int(np.isnan(got).sum())} NaN elements (unwritten?)"
    err = np.abs(got - ref)
    scale = np.abs(ref).max()
    bad = err > 2.0 ** -7 * np.abs(ref) + 0.01 * scale
    rel = np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-30)
    assert not bad.any() and rel < 1e-2, (f"{what}: {int(bad.sum())} of {bad.size} off (max error {err.max():.3g} of "
                                          f"max |ref| {scale:.3g}), relative error {rel:.2e}")


def _layout(x, layout):
    return x if layout == "bhnd" else np.ascontiguousarray(x.transpose(0, 2, 1, 3))


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"d{c[0]}-{'causal' if c[1] else 'full'}-{c[2]}x{c[3]}-"
                                                      f"h{c[5]}kv{c[6]}-{c[7]}-{c[8]}")
@pytest.mark.parametrize("arch", ARCHS)
def test_backward(rng, arch, case):
    d, causal, nq, nk, b, h, hkv, layout, dtype = case
    dt = NP[dtype]
    q, do = (rng.standard_normal((b, h, nq, d)).astype(dt) for _ in range(2))
    k, v = (rng.standard_normal((b, hkv, nk, d)).astype(dt) for _ in range(2))
    args = [_layout(x, layout) for x in (q, k, v)]
    dev = f"sim:{arch}"
    o, lse = hkjit.attention(*args, causal=causal, layout=layout, return_lse=True, device=dev)
    grads = [np.full(x.shape, np.nan, dt) for x in args]
    got = hkjit.attention_backward(_layout(do, layout), *args, o, lse, causal=causal, layout=layout, dq=grads[0],
                                   dk=grads[1], dv=grads[2], device=dev)
    assert all(g is w for g, w in zip(got, grads))
    again = hkjit.attention_backward(_layout(do, layout), *args, o, lse, causal=causal, layout=layout, device=dev)
    for g, a in zip(grads, again):
        assert np.array_equal(np.asarray(g).view(np.uint16), np.asarray(a).view(np.uint16)), "not deterministic"
    back = (lambda x: x) if layout == "bhnd" else (lambda x: x.transpose(0, 2, 1, 3))
    for i in range(b):
        refs = reference_backward(q[i], k[i], v[i], do[i], causal, 1 / np.sqrt(d))
        for name, g, r in zip(("dq", "dk", "dv"), grads, refs):
            _check(back(g)[i], r, f"sim:{arch} {case} batch {i} {name} seed={rng.seed}")


@pytest.mark.parametrize("arch", ARCHS)
def test_backward_varlen(rng, arch):
    d, causal, lq, lk = VARLEN
    cq, ck = np.cumsum((0,) + lq).astype(np.int32), np.cumsum((0,) + lk).astype(np.int32)
    bf = ml_dtypes.bfloat16
    q, do = (rng.standard_normal((cq[-1], 2, d)).astype(bf) for _ in range(2))
    k, v = (rng.standard_normal((ck[-1], 1, d)).astype(bf) for _ in range(2))
    kw = dict(causal=causal, cu_seqlens_q=cq, cu_seqlens_k=ck, device=f"sim:{arch}")
    o, lse = hkjit.attention(q, k, v, return_lse=True, **kw)
    dq, dk, dv = hkjit.attention_backward(do, q, k, v, o, lse, **kw)
    for i in range(len(lq)):
        sq, sk = slice(cq[i], cq[i + 1]), slice(ck[i], ck[i + 1])
        t = lambda x: x.transpose(1, 0, 2)  # noqa: E731
        refs = reference_backward(t(q[sq]), t(k[sk]), t(v[sk]), t(do[sq]), causal, 1 / np.sqrt(d))
        for name, g, r in zip(("dq", "dk", "dv"), (dq[sq], dk[sk], dv[sk]), refs):
            _check(t(g), r, f"sim:{arch} varlen sequence {i} {name} seed={rng.seed}")


@pytest.mark.parametrize("arch", ARCHS)
def test_a_nan_in_the_callers_lse_poisons_its_rows(rng, arch):
    """An LSE row holding a NaN of any bits (NVIDIA's 0x7FFFFFFF, a 0xFF fill, a signalling one) gives
    NaN in that query's dQ and in dK, dV of the keys it sees, never zeros: the kernels read the LSE as
    the default NaN before the probabilities' bf16 conversion, whose rounding add would carry other bits
    into a zero. The other rows' dQ stay finite and as without the poison."""
    bf = ml_dtypes.bfloat16
    q, do = (rng.standard_normal((1, 2, 40, 64)).astype(bf) for _ in range(2))
    k, v = (rng.standard_normal((1, 1, 50, 64)).astype(bf) for _ in range(2))
    dev = f"sim:{arch}"
    o, lse = hkjit.attention(q, k, v, return_lse=True, device=dev)
    clean = hkjit.attention_backward(do, q, k, v, o, lse, device=dev)
    poisoned = np.array(lse, np.float32)
    for row, bits in ((5, 0x7FFFFFFF), (7, 0xFFFFFFFF), (9, 0x7F800001)):
        poisoned[0, 1, row] = np.array(bits, np.uint32).view(np.float32)
    dq, dk, dv = hkjit.attention_backward(do, q, k, v, o, poisoned, device=dev)
    dq, dk, dv, cq = (np.asarray(x, np.float32) for x in (dq, dk, dv, clean[0]))
    assert np.isnan(dq[0, 1, [5, 7, 9]]).all(), f"dQ of the poisoned rows: {dq[0, 1, [5, 7, 9], :4]}"
    others = np.ones(40, bool)
    others[[5, 7, 9]] = False
    assert np.array_equal(dq[0, 1, others], cq[0, 1, others]) and np.array_equal(dq[0, 0], cq[0, 0])
    assert np.isnan(dk).all() and np.isnan(dv).all()      # every key is seen by the poisoned rows (no mask)


@pytest.mark.parametrize("arch", ARCHS)
def test_backward_block_overrides(rng, arch):
    """block_kv (the dQ kernel's KV block) and block_q (the dK/dV kernel's query block) overridden."""
    q, do = (rng.standard_normal((1, 2, 70, 64)).astype(ml_dtypes.bfloat16) for _ in range(2))
    k, v = (rng.standard_normal((1, 1, 90, 64)).astype(ml_dtypes.bfloat16) for _ in range(2))
    dev = f"sim:{arch}"
    o, lse = hkjit.attention(q, k, v, causal=True, return_lse=True, device=dev)
    got = hkjit.attention_backward(do, q, k, v, o, lse, causal=True, device=dev, block_kv=32, block_q=64)
    refs = reference_backward(q[0], k[0], v[0], do[0], True, 1 / 8)
    for name, g, r in zip(("dq", "dk", "dv"), got, refs):
        _check(g[0], r, f"sim:{arch} overrides {name} seed={rng.seed}")


def test_torch_autograd_training_step(rng):
    """hkjit.attention inside a torch loss: .backward() fills q/k/v.grad through attention_backward."""
    torch = pytest.importorskip("torch")
    mk = lambda *s: torch.from_numpy(rng.standard_normal(s).astype(np.float16)).requires_grad_()  # noqa: E731
    q, k, v = mk(1, 2, 50, 64), mk(1, 1, 60, 64), mk(1, 1, 60, 64)
    w = torch.from_numpy(rng.standard_normal((1, 2, 50, 64)).astype(np.float32))
    o = hkjit.attention(q, k, v, causal=True, device="sim:gfx950")
    assert o.requires_grad and o.dtype == torch.float16
    (o.float() * w).sum().backward()
    ro, _ = reference(q.detach()[0].numpy(), k.detach()[0].numpy(), v.detach()[0].numpy(), True, 1 / 8)
    _check(o.detach()[0].numpy(), ro, f"forward seed={rng.seed}")
    refs = reference_backward(q.detach()[0].numpy(), k.detach()[0].numpy(), v.detach()[0].numpy(),
                              w[0].numpy().astype(np.float16), True, 1 / 8)
    for name, t, r in zip(("dq", "dk", "dv"), (q, k, v), refs):
        _check(t.grad[0].numpy(), r, f"autograd {name} seed={rng.seed}")
