"""hkjit.attention on the CDNA simulator (sim:gfx942, sim:gfx950) through the public API, hazard checks
on: GQA (H2 / HKV1) and MHA, D64 and D128, causal and not, Nq != Nk (including causal rows that
see no key), ragged lengths 1..300, both layouts, bf16 and fp16, variable-length batches, block
overrides. Outputs (O and LSE) are NaN-poisoned first (`out=`, `lse=`); inputs are fresh random
numbers each run (the seed is in every failure message); the reference is float64 NumPy.

Tolerance: |O - ref| <= 2^-8 |ref| + 0.02 per element and a relative Frobenius error < 1e-2 (bf16
output rounding, P rounded to 16 bits before P V, Q rounded after pre-scaling); |LSE - ref| <=
1e-2 + 2e-3 |ref|, and -inf exactly where the reference has -inf. The kernels are compiled up
front on all cores into a private cache.
"""

import gc
import os

import numpy as np
import pytest

from attention_reference import reference
from conftest import needs_clang

ml_dtypes = pytest.importorskip("ml_dtypes")
import hkjit  # noqa: E402

pytestmark = needs_clang

ARCHS = ("gfx942", "gfx950")
NP = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16}
# (head_dim, causal, n_q, n_k, batch, heads, kv_heads, layout, dtype)
CASES = [
    (64, False, 1, 1, 1, 2, 1, "bhnd", "bfloat16"),
    (64, True, 300, 300, 1, 2, 1, "bhnd", "bfloat16"),     # two query blocks, five KV blocks, diagonal
    (64, False, 37, 200, 1, 2, 1, "bhnd", "bfloat16"),
    (64, True, 200, 37, 1, 2, 1, "bhnd", "bfloat16"),      # queries 0..162 see no key: O = 0, LSE = -inf
    (128, False, 129, 257, 1, 2, 1, "bhnd", "bfloat16"),
    (128, True, 300, 200, 1, 2, 1, "bhnd", "bfloat16"),
    (64, False, 65, 70, 2, 2, 2, "bnhd", "float16"),       # MHA, batch 2, (B, N, H, D) read by strides
    (128, True, 1, 300, 1, 2, 1, "bnhd", "bfloat16"),      # one query sees every key
    (64, True, 100, 130, 1, 4, 2, "bnhd", "bfloat16"),     # GQA groups of 2 over 2 KV heads
]
VARLEN = [  # (head_dim, causal, query lengths, key lengths)
    (64, True, (1, 70, 300), (5, 70, 260)),
    (128, False, (64, 3, 129), (100, 1, 129)),
]
OVERRIDES = [  # (arch, head_dim, overrides)
    ("gfx950", 64, dict(waves=4, block_kv=32)),
    ("gfx950", 64, dict(block_kv=128)),
    ("gfx942", 64, dict(waves=4)),
]


def _requests():
    for arch in ARCHS:
        for d, causal, nq, nk, b, h, hkv, _layout, dtype in CASES:
            yield arch, dict(head_dim=d, causal=causal, dtype=dtype, batch=b, heads=h, kv_heads=hkv, n_q=nq, n_k=nk)
        for d, causal, lq, lk in VARLEN:
            yield arch, dict(head_dim=d, causal=causal, varlen=True, batch=len(lq), heads=2, kv_heads=1,
                             n_q=max(lq), n_k=max(lk))
    for arch, d, ov in OVERRIDES:
        yield arch, dict(head_dim=d, batch=1, heads=2, kv_heads=1, n_q=100, n_k=150, causal=True, **ov)


@pytest.fixture(scope="module", autouse=True)
def _private_cache(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HKJIT_CACHE_DIR", str(tmp_path_factory.mktemp("hkjit-cache")))
        hkjit.reset_state()
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(max(2, min(8, os.cpu_count() or 2))) as ex:
            list(ex.map(lambda r: hkjit.build("attention", target=r[0], **r[1]), list(_requests())))
        yield
        hkjit.reset_state()
        gc.collect()


class _Rng:
    def __init__(self):
        self.seed = np.random.SeedSequence().entropy
        self.gen = np.random.default_rng(self.seed)

    def array(self, shape, dtype):
        return self.gen.standard_normal(shape).astype(NP[dtype])


@pytest.fixture
def rng():
    return _Rng()


def _check(o, lse, ref_o, ref_lse, what):
    o = np.asarray(o, np.float64)
    assert not np.isnan(o).any(), f"{what}: {int(np.isnan(o).sum())} NaN elements of O (unwritten?)"
    assert not np.isnan(lse).any(), f"{what}: {int(np.isnan(lse).sum())} NaN elements of LSE (unwritten?)"
    err = np.abs(o - ref_o)
    bad = err > 2.0 ** -8 * np.abs(ref_o) + 0.02
    rel = np.linalg.norm(o - ref_o) / max(np.linalg.norm(ref_o), 1e-30)
    assert not bad.any() and rel < 1e-2, (f"{what}: {int(bad.sum())} of {bad.size} O elements off (first at "
                                          f"{tuple(np.argwhere(bad)[0]) if bad.any() else None}, max error "
                                          f"{err.max():.3g}), relative error {rel:.2e}")
    assert np.array_equal(np.isneginf(lse), np.isneginf(ref_lse)), f"{what}: LSE is -inf at the wrong rows"
    fin = np.isfinite(ref_lse)
    lerr = np.abs(lse[fin] - ref_lse[fin])
    assert (lerr <= 1e-2 + 2e-3 * np.abs(ref_lse[fin])).all(), f"{what}: LSE max error {lerr.max():.3g}"


def _to_layout(x, layout):          # x: (B, H, N, D) -> the array the caller passes
    return x if layout == "bhnd" else np.ascontiguousarray(x.transpose(0, 2, 1, 3))


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"d{c[0]}-{'causal' if c[1] else 'full'}-{c[2]}x{c[3]}-"
                                                      f"b{c[4]}h{c[5]}kv{c[6]}-{c[7]}-{c[8]}")
@pytest.mark.parametrize("arch", ARCHS)
def test_forward(rng, arch, case):
    d, causal, nq, nk, b, h, hkv, layout, dtype = case
    q, k, v = rng.array((b, h, nq, d), dtype), rng.array((b, hkv, nk, d), dtype), rng.array((b, hkv, nk, d), dtype)
    out = np.full(_to_layout(q, layout).shape, np.nan, NP[dtype])
    lse = np.full((b, h, nq), np.nan, np.float32)
    scale = 0.7 / np.sqrt(d)
    got = hkjit.attention(_to_layout(q, layout), _to_layout(k, layout), _to_layout(v, layout), causal=causal,
                          scale=scale, layout=layout, out=out, lse=lse, device=f"sim:{arch}")
    assert got[0] is out and got[1] is lse
    o = out if layout == "bhnd" else out.transpose(0, 2, 1, 3)
    for i in range(b):
        ro, rl = reference(q[i], k[i], v[i], causal, scale)
        _check(o[i], lse[i], ro, rl, f"sim:{arch} {case} batch {i} seed={rng.seed}")


@pytest.mark.parametrize("case", VARLEN, ids=lambda c: f"d{c[0]}-{'causal' if c[1] else 'full'}-{c[2]}-{c[3]}")
@pytest.mark.parametrize("arch", ARCHS)
def test_varlen(rng, arch, case):
    d, causal, lq, lk = case
    cq, ck = np.cumsum((0,) + lq).astype(np.int32), np.cumsum((0,) + lk).astype(np.int32)
    q, k, v = rng.array((cq[-1], 2, d), "bfloat16"), rng.array((ck[-1], 1, d), "bfloat16"), \
        rng.array((ck[-1], 1, d), "bfloat16")
    out = np.full(q.shape, np.nan, ml_dtypes.bfloat16)
    lse = np.full((2, cq[-1]), np.nan, np.float32)
    hkjit.attention(q, k, v, causal=causal, cu_seqlens_q=cq, cu_seqlens_k=ck, out=out, lse=lse, device=f"sim:{arch}")
    for i in range(len(lq)):
        sq, sk = slice(cq[i], cq[i + 1]), slice(ck[i], ck[i + 1])
        ro, rl = reference(q[sq].transpose(1, 0, 2), k[sk].transpose(1, 0, 2), v[sk].transpose(1, 0, 2), causal,
                           1 / np.sqrt(d))
        _check(out[sq].transpose(1, 0, 2), lse[:, sq], ro, rl, f"sim:{arch} varlen {case} sequence {i} seed={rng.seed}")


@pytest.mark.parametrize("arch,d,overrides", OVERRIDES, ids=lambda x: str(x))
def test_block_overrides(rng, arch, d, overrides):
    q, k, v = rng.array((1, 2, 100, d), "bfloat16"), rng.array((1, 1, 150, d), "bfloat16"), \
        rng.array((1, 1, 150, d), "bfloat16")
    o, lse = hkjit.attention(q, k, v, causal=True, return_lse=True, device=f"sim:{arch}", **overrides)
    ro, rl = reference(q[0], k[0], v[0], True, 1 / np.sqrt(d))
    _check(o[0], lse[0], ro, rl, f"sim:{arch} {overrides} seed={rng.seed}")


def test_torch_cpu_tensors_and_default_outputs(rng):
    torch = pytest.importorskip("torch")
    q, k, v = (torch.from_numpy(rng.array((1, 2, 40, 64), "float16")) for _ in range(3))
    o = hkjit.attention(q, k, v, device="sim:gfx950")          # no return_lse: one array, q's kind
    assert isinstance(o, torch.Tensor) and o.shape == q.shape and o.dtype == torch.float16
    ro, _ = reference(q[0].numpy(), k[0].numpy(), v[0].numpy(), False, 1 / 8)
    err = np.abs(o[0].numpy().astype(np.float64) - ro)
    assert (err <= 2.0 ** -8 * np.abs(ro) + 0.02).all(), f"max error {err.max():.3g}, seed={rng.seed}"


@pytest.mark.parametrize("arch", ARCHS)
def test_varlen_empty_sequences(rng, arch):
    """Zero-length query or key sequences: nothing written for empty query sequences, O = 0 and
    LSE = -inf for queries whose key sequence is empty, the others exact."""
    lq, lk = (3, 0, 40), (5, 7, 0)
    cq, ck = np.cumsum((0,) + lq).astype(np.int32), np.cumsum((0,) + lk).astype(np.int32)
    q, k, v = rng.array((cq[-1], 2, 64), "bfloat16"), rng.array((ck[-1], 1, 64), "bfloat16"), \
        rng.array((ck[-1], 1, 64), "bfloat16")
    out = np.full(q.shape, np.nan, ml_dtypes.bfloat16)
    lse = np.full((2, cq[-1]), np.nan, np.float32)
    hkjit.attention(q, k, v, causal=True, cu_seqlens_q=cq, cu_seqlens_k=ck, out=out, lse=lse, device=f"sim:{arch}")
    ro, rl = reference(q[:3].transpose(1, 0, 2), k[:5].transpose(1, 0, 2), v[:5].transpose(1, 0, 2), True, 1 / 8)
    _check(out[:3].transpose(1, 0, 2), lse[:, :3], ro, rl, f"sim:{arch} sequence 0 seed={rng.seed}")
    assert (np.asarray(out[3:], np.float32) == 0).all() and np.isneginf(lse[:, 3:]).all()
