"""hkjit.attention's bad-input errors: each is hkjit's own type, names the fix, and comes before any
compile or launch (the kernel cache stays empty)."""

import numpy as np
import pytest

import hkjit
from hkjit.errors import DTypeError, InvalidArgumentError, TargetError

ml_dtypes = pytest.importorskip("ml_dtypes")
BF = ml_dtypes.bfloat16


def _a(*shape, dtype=BF):
    return np.ones(shape, dtype)


@pytest.fixture(autouse=True)
def _nothing_compiled(cache_dir):
    yield
    entries = [p for p in cache_dir.rglob("*") if p.is_file()]
    assert not entries, f"a bad input reached the compiler: {entries}"


CASES = [
    # (q, k, v, keywords, error type, words the message must contain)
    ((2, 2, 8, 64), (3, 1, 8, 64), (3, 1, 8, 64), {}, InvalidArgumentError, "batch sizes differ"),
    ((1, 3, 8, 64), (1, 2, 8, 64), (1, 2, 8, 64), {}, InvalidArgumentError, "multiple of the key/value heads"),
    ((1, 2, 8, 64), (1, 1, 8, 128), (1, 1, 8, 128), {}, InvalidArgumentError, "head dims differ"),
    ((1, 2, 8, 96), (1, 1, 8, 96), (1, 1, 8, 96), {}, InvalidArgumentError, "64 and 128"),
    ((1, 2, 8, 64), (1, 1, 8, 64), (1, 1, 9, 64), {}, InvalidArgumentError, "same shape"),
    ((1, 2, 8, 64), (1, 1, 8, 64), (1, 1, 8, 64), {"layout": "nbhd"}, InvalidArgumentError, "'bhnd'"),
    ((2, 8, 64), (2, 8, 64), (2, 8, 64), {}, InvalidArgumentError, "(batch, heads, seq, head_dim)"),
    ((1, 2, 0, 64), (1, 1, 8, 64), (1, 1, 8, 64), {}, InvalidArgumentError, ">= 1"),
    ((1, 2, 8, 64), (1, 1, 8, 64), (1, 1, 8, 64), {"block_kv": 48}, InvalidArgumentError, "multiple of 32"),
    ((1, 2, 8, 64), (1, 1, 8, 64), (1, 1, 8, 64), {"waves": 6}, InvalidArgumentError, "valid choices: 4, 8"),
    ((1, 2, 8, 128), (1, 1, 8, 128), (1, 1, 8, 128), {"block_kv": 256}, InvalidArgumentError, "LDS"),
    ((1, 2, 8, 128), (1, 1, 8, 128), (1, 1, 8, 128), {"block_kv": 128, "device": "sim:gfx950"}, InvalidArgumentError,
     "registers"),
    ((1, 2, 8, 64), (1, 1, 8, 64), (1, 1, 8, 64), {"block_q": 64}, InvalidArgumentError, "block_kv, waves"),
]


@pytest.mark.parametrize("q,k,v,kw,err,words", CASES, ids=[c[-1] for c in CASES])
def test_bad_shapes_and_options(q, k, v, kw, err, words):
    with pytest.raises(err) as e:
        hkjit.attention(_a(*q), _a(*k), _a(*v), **{"device": "sim:gfx942", **kw})
    assert words in str(e.value)


def test_dtypes():
    with pytest.raises(DTypeError, match="bfloat16, float16"):
        hkjit.attention(_a(1, 2, 8, 64, dtype=np.float32), _a(1, 1, 8, 64, dtype=np.float32),
                        _a(1, 1, 8, 64, dtype=np.float32), device="sim:gfx950")
    with pytest.raises(DTypeError, match="one dtype"):
        hkjit.attention(_a(1, 2, 8, 64), _a(1, 1, 8, 64, dtype=np.float16), _a(1, 1, 8, 64), device="sim:gfx950")
    with pytest.raises(DTypeError, match="q's"):
        hkjit.attention(_a(1, 2, 8, 64), _a(1, 1, 8, 64), _a(1, 1, 8, 64), out=_a(1, 2, 8, 64, dtype=np.float16),
                        device="sim:gfx950")


def test_bad_outputs_and_scalars():
    with pytest.raises(InvalidArgumentError, match="q's"):
        hkjit.attention(_a(1, 2, 8, 64), _a(1, 1, 8, 64), _a(1, 1, 8, 64), out=_a(1, 2, 9, 64), device="sim:gfx950")
    with pytest.raises(InvalidArgumentError, match="float32 array of shape"):
        hkjit.attention(_a(1, 2, 8, 64), _a(1, 1, 8, 64), _a(1, 1, 8, 64), lse=np.ones((1, 2, 8)),
                        device="sim:gfx950")
    with pytest.raises(InvalidArgumentError, match="True or False"):
        hkjit.attention(_a(1, 2, 8, 64), _a(1, 1, 8, 64), _a(1, 1, 8, 64), causal="yes", device="sim:gfx950")
    with pytest.raises(InvalidArgumentError, match="finite"):
        hkjit.attention(_a(1, 2, 8, 64), _a(1, 1, 8, 64), _a(1, 1, 8, 64), scale=float("nan"), device="sim:gfx950")


def _packed(total_q=10, total_k=12):
    return _a(total_q, 2, 64), _a(total_k, 1, 64), _a(total_k, 1, 64)


def test_cu_seqlens():
    q, k, v = _packed()
    good = np.array([0, 4, 10], np.int32)
    cases = [
        (dict(cu_seqlens_q=good), "both cu_seqlens_q and cu_seqlens_k"),
        (dict(cu_seqlens_q=good, cu_seqlens_k=np.array([0, 7, 5], np.int32)), "not monotone"),
        (dict(cu_seqlens_q=np.array([1, 4, 10], np.int32), cu_seqlens_k=good), "start at 0"),
        (dict(cu_seqlens_q=np.array([0, 4, 11], np.int32), cu_seqlens_k=good), "has 10 rows"),
        (dict(cu_seqlens_q=good, cu_seqlens_k=good, max_seqlen_q=3), ">= the longest sequence (6)"),
        (dict(cu_seqlens_q=good, cu_seqlens_k=np.array([0, 4, 6, 12], np.int32)), "batch + 1 long"),
        (dict(max_seqlen_q=4), "go with cu_seqlens"),
    ]
    for kw, words in cases:
        with pytest.raises(InvalidArgumentError) as e:
            hkjit.attention(q, k, v, device="sim:gfx950", **kw)
        assert words in str(e.value), (kw, str(e.value))
    with pytest.raises(DTypeError, match="int32"):
        hkjit.attention(q, k, v, cu_seqlens_q=good.astype(np.int64), cu_seqlens_k=good, device="sim:gfx950")
    with pytest.raises(InvalidArgumentError, match=r"\(total, heads, head_dim\)"):
        hkjit.attention(_a(1, 2, 8, 64), k, v, cu_seqlens_q=good, cu_seqlens_k=good, device="sim:gfx950")


def test_hopper_placeholder_or_module():
    """Without the Hopper forward module, planning for sm_90a says so (no fake kernel)."""
    from hkjit.ops import attention as mod
    import importlib.util
    if importlib.util.find_spec(mod._HOPPER_FWD) is not None:
        pytest.skip("the Hopper forward module is present")
    with pytest.raises(TargetError, match="not built yet"):
        mod.ATTENTION.plan("sm_90a", batch=1, heads=2, kv_heads=1, n_q=8, n_k=8, head_dim=64)


def test_backward_bad_inputs():
    q, k, v = _a(1, 2, 8, 64), _a(1, 1, 8, 64), _a(1, 1, 8, 64)
    o, lse = _a(1, 2, 8, 64), np.zeros((1, 2, 8), np.float32)
    cases = [
        ((_a(1, 2, 9, 64), q, k, v, o, lse), {}, "grad_out has shape"),
        ((q, q, k, v, _a(1, 2, 8, 64, dtype=np.float16), lse), {}, "out has shape"),
        ((q, q, k, v, o, np.zeros((1, 2, 9), np.float32)), {}, "lse has shape"),
        ((q, q, k, v, o, lse), {"block_z": 64}, "unknown tile override"),
        ((q, q, k, v, o, lse), {"block_q": 48}, "multiple of 32"),
        ((q, q, k, v, o, lse), {"dk": _a(1, 2, 8, 64)}, "dk has shape"),
        ((_a(1, 3, 8, 64), _a(1, 3, 8, 64), _a(1, 2, 8, 64), _a(1, 2, 8, 64), _a(1, 3, 8, 64),
          np.zeros((1, 3, 8), np.float32)), {}, "multiple of the key"),
    ]
    for args, kw, words in cases:
        with pytest.raises(InvalidArgumentError) as e:
            hkjit.attention_backward(*args, device="sim:gfx950", **kw)
        assert words in str(e.value), (words, str(e.value))
    with pytest.raises(TypeError):
        hkjit.attention_backward(q, q, k, v, o, device="sim:gfx950")   # lse is required


def test_autograd_refuses_out():
    torch = pytest.importorskip("torch")
    q = torch.ones(1, 2, 8, 64, dtype=torch.float16, requires_grad=True)
    k = torch.ones(1, 1, 8, 64, dtype=torch.float16)
    with pytest.raises(InvalidArgumentError, match="require grad"):
        hkjit.attention(q, k, k, out=torch.empty(1, 2, 8, 64, dtype=torch.float16), device="sim:gfx950")
