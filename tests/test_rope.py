"""hkjit.rope / hkjit.rope_qk (kernel_sources/rope.cuh): simulator correctness on gfx942 and gfx950
against float64 NumPy written from the published formulas (half rotation: pairs (i, i + rot/2);
interleaved: pairs (2i, 2i + 1)), both layouts, partial rotary dims, positions, GQA, in place,
outputs poisoned; bad input refused before compiling; static figures on every target; a GPU run
against torch (skipped without a GPU)."""
import ctypes

import numpy as np
import pytest

import hkjit
from hkjit.errors import DTypeError, InvalidArgumentError
from hkjit.ops import rope as rope_mod

from conftest import HAVE_GPU, needs_clang, needs_nvrtc, nvrtc_compile_op

ml_dtypes = pytest.importorskip("ml_dtypes")
rng = np.random.default_rng()
NP = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16, "float32": np.float32}
TOL = {"bfloat16": 1e-2, "float16": 2e-3, "float32": 1e-5}


def reference(x, cos, sin, interleaved, layout, positions=None):
    x = np.asarray(x, np.float64)
    batch, seq = x.shape[0], x.shape[2] if layout == "bhnd" else x.shape[1]
    half = cos.shape[1]
    rot = 2 * half
    pos = np.arange(seq)[None, :].repeat(batch, 0) if positions is None else np.broadcast_to(positions, (batch, seq))
    c, s = np.asarray(cos, np.float64)[pos], np.asarray(sin, np.float64)[pos]     # (B, N, half)
    c, s = (c[:, None], s[:, None]) if layout == "bhnd" else (c[:, :, None], s[:, :, None])
    y = x.copy()
    a, b = (x[..., 0:rot:2], x[..., 1:rot:2]) if interleaved else (x[..., :half], x[..., half:rot])
    first, second = a * c - b * s, b * c + a * s
    if interleaved:
        y[..., 0:rot:2], y[..., 1:rot:2] = first, second
    else:
        y[..., :half], y[..., half:rot] = first, second
    return y


def rel_err(got, ref):
    got = np.asarray(got, np.float64)
    assert np.isfinite(got).all(), "an element was never written"
    return np.linalg.norm(got - ref) / np.linalg.norm(ref)


def tables(rows, half, dtype="float32"):
    angles = rng.uniform(-4, 4, (rows, half))
    return np.cos(angles).astype(NP[dtype]), np.sin(angles).astype(NP[dtype])


def make_x(batch, heads, seq, d, layout, dtype):
    shape = (batch, heads, seq, d) if layout == "bhnd" else (batch, seq, heads, d)
    return (rng.standard_normal(shape) * rng.uniform(0.5, 3)).astype(NP[dtype])


# (batch, heads, seq, d, rotated half, dtype, cos dtype): ragged heads/lengths, tails of every
# vector width, partial rotation (rot < d), a head dim larger than a warp's pieces.
SIM_CASES = [(1, 1, 1, 2, 1, "float32", "float32"), (2, 3, 5, 10, 3, "float32", "float32"),
             (1, 2, 7, 128, 64, "bfloat16", "float32"), (2, 1, 3, 64, 16, "float16", "float16"),
             (1, 3, 2, 80, 40, "bfloat16", "bfloat16"), (1, 1, 2, 512, 256, "float16", "float32")]


@needs_clang
@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
@pytest.mark.parametrize("case", SIM_CASES)
@pytest.mark.parametrize("interleaved", [False, True])
def test_simulated(cache_dir, arch, case, interleaved):
    batch, heads, seq, d, half, dtype, cdt = case
    layout = "bnhd" if (seq + heads) % 2 else "bhnd"
    x = make_x(batch, heads, seq, d, layout, dtype)
    cos, sin = tables(seq + 2, half, cdt)
    out = np.full(x.shape, np.nan, NP[dtype])
    got = hkjit.rope(x, cos, sin, interleaved=interleaved, layout=layout, out=out, device=f"sim:{arch}")
    assert got is out
    assert rel_err(out, reference(x, cos, sin, interleaved, layout)) < TOL[dtype]


@needs_clang
@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
@pytest.mark.parametrize("layout", ["bhnd", "bnhd"])
def test_simulated_positions_and_in_place(cache_dir, arch, layout):
    """Per-batch int64 positions (in any order, repeated), then (N,) int32 positions, in place."""
    x = make_x(2, 3, 5, 96, layout, "float32")
    cos, sin = tables(40, 32)
    positions = rng.integers(0, 40, (2, 5))
    ref = reference(x, cos, sin, False, layout, positions)
    assert rel_err(hkjit.rope(x, cos, sin, positions=positions, layout=layout, device=f"sim:{arch}"), ref) < 1e-5
    pos1 = rng.integers(0, 40, 5).astype(np.int32)
    y = x.copy()
    hkjit.rope(y, cos, sin, positions=pos1, layout=layout, out=y, device=f"sim:{arch}")
    assert rel_err(y, reference(x, cos, sin, False, layout, pos1)) < 1e-5


@needs_clang
@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_simulated_position_outside_the_table_gives_nan_rows(cache_dir, arch):
    x = make_x(1, 2, 3, 16, "bhnd", "float32")
    cos, sin = tables(4, 8)
    y = hkjit.rope(x, cos, sin, positions=np.array([0, 9, -1], np.int32), device=f"sim:{arch}")
    assert np.isfinite(y[:, :, 0]).all() and np.isnan(y[:, :, 1:]).all()


@needs_clang
@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
@pytest.mark.parametrize("interleaved", [False, True])
def test_simulated_rope_qk_gqa(cache_dir, arch, interleaved):
    q = make_x(2, 4, 3, 64, "bnhd", "bfloat16")
    k = make_x(2, 1, 3, 64, "bnhd", "bfloat16")
    cos, sin = tables(3, 24)                                       # partial: 48 of 64 columns
    q_out = np.full(q.shape, np.nan, NP["bfloat16"])
    qo, ko = hkjit.rope_qk(q, k, cos, sin, interleaved=interleaved, layout="bnhd", q_out=q_out,
                           device=f"sim:{arch}")
    assert qo is q_out
    assert rel_err(qo, reference(q, cos, sin, interleaved, "bnhd")) < TOL["bfloat16"]
    assert rel_err(ko, reference(k, cos, sin, interleaved, "bnhd")) < TOL["bfloat16"]


@needs_clang
@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
@pytest.mark.parametrize("interleaved", [False, True])
def test_simulated_exact_rows_match_the_general_path(cache_dir, arch, interleaved):
    """exact=1 (rot == d and a row one step: no column loop or tests; the sm_90a default) gives
    the general path's bits: ragged rows, positions, rope_qk's two tensors, a persistent grid."""
    dev = f"sim:{arch}"
    q, k = make_x(2, 3, 5, 64, "bhnd", "bfloat16"), make_x(2, 1, 5, 64, "bhnd", "bfloat16")
    cos, sin = tables(9, 32)
    positions = rng.integers(0, 9, (2, 5)).astype(np.int32)
    tiles = dict(row_threads=8, chunks=1) if interleaved else dict(row_threads=8, chunks=1, vec=4)
    runs = [hkjit.rope_qk(q, k, cos, sin, positions=positions, interleaved=interleaved, device=dev, exact=e,
                          **tiles) for e in (0, 1)]
    runs.append(hkjit.rope_qk(q, k, cos, sin, positions=positions, interleaved=interleaved, device=dev, exact=1,
                              blocks=2, **tiles))
    for other in runs[1:]:
        assert all(np.array_equal(a, b) for a, b in zip(runs[0], other))
    assert rel_err(runs[1][0], reference(q, cos, sin, interleaved, "bhnd", positions)) < TOL["bfloat16"]
    with pytest.raises(InvalidArgumentError, match="exact=1 needs rot == d"):
        hkjit.build("rope", target="sm_90a", rows=4, d=128, rot=64, exact=1)


def test_bad_input_is_refused_before_compiling(cache_dir):
    x = make_x(1, 2, 3, 16, "bhnd", "float32")
    cos, sin = tables(3, 8)
    cases = [
        (dict(x=x[0]), InvalidArgumentError, "4-D"),
        (dict(layout="nhd"), InvalidArgumentError, "layout"),
        (dict(interleaved="yes"), InvalidArgumentError, "interleaved"),
        (dict(cos=tables(3, 9)[0], sin=tables(3, 9)[1]), InvalidArgumentError, "more than the head"),
        (dict(cos=cos[:2], sin=sin[:2]), InvalidArgumentError, "positions"),
        (dict(sin=sin.astype(np.float16)), DTypeError, "share"),
        (dict(positions=np.zeros(3, np.float32)), DTypeError, "int32 or int64"),
        (dict(positions=np.zeros((2, 3), np.int32)), InvalidArgumentError, "positions must be"),
        (dict(out=np.empty((1, 2, 3, 8), np.float32)), InvalidArgumentError, "out"),
        (dict(x=x.astype(np.int32)), DTypeError, "dtype"),
    ]
    for change, error, words in cases:
        kw = dict(x=x, cos=cos, sin=sin) | change
        xx, c, s = kw.pop("x"), kw.pop("cos"), kw.pop("sin")
        with pytest.raises(error, match=words):
            hkjit.rope(xx, c, s, device="sim:gfx950", **kw)
    with pytest.raises(InvalidArgumentError, match="differ in batch"):
        hkjit.rope_qk(x, make_x(1, 2, 4, 16, "bhnd", "float32"), cos, sin, device="sim:gfx950")
    with pytest.raises(InvalidArgumentError, match="vec"):
        hkjit.build("rope", target="gfx950", rows=8, d=64, rot=64, vec=16)
    with pytest.raises(InvalidArgumentError, match="rot"):
        hkjit.build("rope", target="gfx950", rows=8, d=64, rot=66)
    assert not list(cache_dir.rglob("*.co")) and not list(cache_dir.rglob("*.hsaco"))


def test_args_layout_matches_the_documented_contract():
    assert ctypes.sizeof(rope_mod.Tensor) == 88 and rope_mod.Args.t.offset == 0
    offsets = [getattr(rope_mod.Args, f).offset for f, _ in rope_mod.Args._fields_]
    assert offsets == [0, 176, 184, 192, 200, 208, 216, 220, 224] and ctypes.sizeof(rope_mod.Args) == 232


STATIC = [dict(rows=8 * 32 * 2048, d=128, rot=128), dict(rows=4096, d=128, rot=128, interleaved=True),
          dict(rows=4096, d=64, rot=64, cos_dtype="bfloat16"), dict(rows=4096, d=256, rot=128, positions="int64")]


@needs_clang
@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
@pytest.mark.parametrize("params", STATIC)
def test_amd_static(cache_dir, arch, params):
    report = hkjit.inspect("rope", arch, **params)
    assert report["spills"] == 0 and report["scratch_bytes"] == 0
    assert report["kernarg_bytes"] >= ctypes.sizeof(rope_mod.Args)
    mix = report.get("instruction_mix")
    if mix and params.get("cos_dtype") != "float32":
        assert mix["classes"].get("load_16B", 0) > 0, mix["classes"]


@needs_nvrtc
@pytest.mark.parametrize("params", STATIC)
def test_nvrtc_static(params):
    result = nvrtc_compile_op("rope", **params)
    assert result.meta["spills"] == 0 and result.meta["stack_bytes"] == 0, result.log
    if params.get("cos_dtype") == "bfloat16" or params.get("interleaved"):
        assert "ld.global.v4" in result.ptx                      # 16-byte x (and cos) accesses


# --- on the GPU --------------------------------------------------------------------------------
def _torch_rope(torch, x, cos, sin, interleaved, layout, positions=None):
    """The published formulas in float64 torch (what the models' code computes)."""
    x = x.double()
    seq = x.shape[2] if layout == "bhnd" else x.shape[1]
    pos = torch.arange(seq, device=x.device)[None].expand(x.shape[0], seq) if positions is None else \
        positions.long().expand(x.shape[0], seq)
    c, s = cos.double()[pos], sin.double()[pos]
    c, s = (c[:, None], s[:, None]) if layout == "bhnd" else (c[:, :, None], s[:, :, None])
    half = cos.shape[1]
    y = x.clone()
    if interleaved:
        a, b = x[..., 0:2 * half:2], x[..., 1:2 * half:2]
        y[..., 0:2 * half:2], y[..., 1:2 * half:2] = a * c - b * s, b * c + a * s
    else:
        a, b = x[..., :half], x[..., half:2 * half]
        y[..., :half], y[..., half:2 * half] = a * c - b * s, b * c + a * s
    return y


GPU_CASES = [(1, 1, 1, 2, 1), (3, 5, 129, 64, 32), (2, 32, 1024, 128, 64), (1, 7, 4097, 128, 32), (2, 4, 33, 256, 128)]


@pytest.mark.gpu
@pytest.mark.skipif(not HAVE_GPU, reason="no CUDA GPU here")
@pytest.mark.parametrize("case", GPU_CASES)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("layout", ["bhnd", "bnhd"])
@pytest.mark.parametrize("interleaved", [False, True])
def test_gpu(case, dtype, layout, interleaved):
    import torch
    batch, heads, seq, d, half = case
    dt = getattr(torch, dtype)
    shape = (batch, heads, seq, d) if layout == "bhnd" else (batch, seq, heads, d)
    x = torch.randn(shape, device="cuda", dtype=dt)
    ang = torch.rand(seq + 5, half, device="cuda", dtype=torch.float64) * 8 - 4
    cos, sin = ang.cos().float(), ang.sin().float()
    out = torch.full_like(x, float("nan"))
    hkjit.rope(x, cos, sin, interleaved=interleaved, layout=layout, out=out)
    ref = _torch_rope(torch, x, cos, sin, interleaved, layout)
    assert torch.isfinite(out).all()
    assert ((out.double() - ref).norm() / ref.norm()).item() < TOL[dtype]
    positions = torch.randint(0, seq + 5, (batch, seq), device="cuda")
    got = hkjit.rope(x, cos.to(dt), sin.to(dt), interleaved=interleaved, layout=layout, positions=positions)
    ref = _torch_rope(torch, x, cos.to(dt), sin.to(dt), interleaved, layout, positions)
    assert ((got.double() - ref).norm() / ref.norm()).item() < TOL[dtype]
    k = torch.randn(shape[:2] + (1,) + shape[3:] if layout == "bnhd" else (batch, 1, seq, d), device="cuda", dtype=dt)
    qo, ko = hkjit.rope_qk(x, k, cos, sin, interleaved=interleaved, layout=layout)
    assert torch.equal(qo, out)
    ref_k = _torch_rope(torch, k, cos, sin, interleaved, layout)
    assert ((ko.double() - ref_k).norm() / ref_k.norm()).item() < TOL[dtype]
    y = x.clone()
    hkjit.rope(y, cos, sin, interleaved=interleaved, layout=layout, out=y)      # in place
    assert torch.equal(y, out)
    op = hkjit.ops.get("rope")
    if op.plan("sm_90a", rows=batch * heads * seq, d=d, rot=2 * half, dtype=dtype,
               interleaved=interleaved).config["exact"]:
        general = hkjit.rope(x, cos, sin, interleaved=interleaved, layout=layout, exact=0)
        assert ((general.double() - out.double()).norm() / out.double().norm()).item() < TOL[dtype]
