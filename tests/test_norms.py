"""The fused norms (kernel_sources/norm.cuh): add_rms_norm, layer_norm, dropout_add_layer_norm.
Simulator correctness on gfx942 and gfx950 against float64 NumPy (ragged rows and hidden sizes, rows
with a large mean, a row longer than the tile's columns, in place, poisoned outputs); the dropout
mask the same on every target and schedule, p = 0 equal to add + layer_norm, the kept fraction
within a binomial bound; bad input refused before compiling; static figures; GPU against torch."""
import ctypes

import numpy as np
import pytest

import hkjit
from hkjit.errors import DTypeError, InvalidArgumentError
from hkjit.ops import norms as norms_mod

from conftest import HAVE_GPU, needs_clang, needs_nvrtc, nvrtc_compile_op

ml_dtypes = pytest.importorskip("ml_dtypes")
rng = np.random.default_rng()
NP = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16, "float32": np.float32}
TOL = {"bfloat16": 1e-2, "float16": 2e-3, "float32": 2e-5}
F64 = np.float64


def layer_norm_ref(s, w, b, eps):
    s = np.asarray(s, F64)
    m = s.mean(-1, keepdims=True)
    y = (s - m) / np.sqrt(((s - m) ** 2).mean(-1, keepdims=True) + eps)
    return y * (1 if w is None else np.asarray(w, F64)) + (0 if b is None else np.asarray(b, F64))


def rms_ref(s, w, eps):
    s = np.asarray(s, F64)
    return s / np.sqrt((s ** 2).mean(-1, keepdims=True) + eps) * np.asarray(w, F64)


def rel_err(got, ref):
    got = np.asarray(got, F64)
    assert np.isfinite(got).all(), "an element was never written"
    return np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-30)


def rand(shape, dtype, mean=0.0):
    return (rng.standard_normal(shape) * rng.uniform(0.5, 3) + mean).astype(NP[dtype])


# (shape, dtype, tile overrides): one element, ragged tails, several leading dims, a large mean,
# and a row longer than the tile holds (column blocks combined).
CASES = [((1, 1), "float32", {}), ((3, 129), "bfloat16", {}), ((5, 1000), "float16", {}),
         ((2, 3, 77), "float32", {}), ((2, 4100), "float32", dict(threads=64, row_threads=64, chunks=1))]


@needs_clang
@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
@pytest.mark.parametrize("shape,dtype,tiles", CASES)
def test_simulated(cache_dir, arch, shape, dtype, tiles):
    dev = f"sim:{arch}"
    x, r = rand(shape, dtype, mean=50.0), rand(shape, dtype)
    w, b = (rng.random(shape[-1]) + 0.5).astype(NP[dtype]), rand(shape[-1:], dtype)
    out = np.full(shape, np.nan, NP[dtype])
    assert hkjit.layer_norm(x, w, b, 1e-5, out=out, device=dev, **tiles) is out
    assert rel_err(out, layer_norm_ref(x, w, b, 1e-5)) < TOL[dtype] * (1 if dtype != "float32" else 5)
    assert rel_err(hkjit.layer_norm(x, None, None, 1e-5, device=dev, **tiles),
                   layer_norm_ref(x, None, None, 1e-5)) < TOL[dtype] * (1 if dtype != "float32" else 5)
    s_ref = (np.asarray(x, F64) + np.asarray(r, F64)).astype(NP[dtype])      # the sum, rounded
    y, s = hkjit.add_rms_norm(x, r, w, 1e-6, device=dev, **tiles)
    assert np.array_equal(s, s_ref)
    assert rel_err(y, rms_ref(s_ref, w, 1e-6)) < TOL[dtype]
    yd, sd = hkjit.dropout_add_layer_norm(x, r, w, b, 0.0, 1e-5, seed=3, device=dev, **tiles)
    assert np.array_equal(sd, s_ref)           # p = 0: the sum exactly, the norm as layer_norm's (its own schedule)
    assert rel_err(yd, layer_norm_ref(s_ref, w, b, 1e-5)) < TOL[dtype] * (1 if dtype != "float32" else 5)


@needs_clang
@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_simulated_in_place(cache_dir, arch):
    x, r = rand((4, 300), "bfloat16"), rand((4, 300), "bfloat16")
    w = (rng.random(300) + 0.5).astype(NP["bfloat16"])
    x0, r0 = x.copy(), r.copy()
    y, s = hkjit.add_rms_norm(x, r, w, out=x, residual_out=r, device=f"sim:{arch}")
    assert y is x and s is r
    s_ref = (np.asarray(x0, F64) + np.asarray(r0, F64)).astype(NP["bfloat16"])
    assert np.array_equal(r, s_ref) and rel_err(x, rms_ref(s_ref, w, 1e-6)) < TOL["bfloat16"]


@needs_clang
@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_simulated_exact_rows_match_the_general_path(cache_dir, arch):
    """exact=1 (cols == the tile's columns: rows tested only, weight and bias kept in registers,
    the default on sm_90a for short rows) gives the general path's bits for every fused norm, with
    and without weight and bias, dropout on, ragged row counts, a persistent grid; so does
    packed_wb=1 (weight and bias kept as the dtype, converted per row, read again per row block)."""
    dev = f"sim:{arch}"
    rows, hidden, dtype = 37, 128, "bfloat16"
    x, r = rand((rows, hidden), dtype, mean=50.0), rand((rows, hidden), dtype)
    w, b = (rng.random(hidden) + 0.5).astype(NP[dtype]), rand((hidden,), dtype)
    for tiles in ({}, dict(row_threads=16, chunks=1, blocks=2)):
        runs = {}
        for run, path in enumerate((dict(exact=0), dict(exact=1), dict(exact=1, packed_wb=1))):
            kw = dict(device=dev, **path, **tiles)
            out = np.full((rows, hidden), np.nan, NP[dtype])
            hkjit.layer_norm(x, w, b, 1e-5, out=out, **kw)
            runs[run] = [out, hkjit.layer_norm(x, None, None, 1e-5, **kw),
                         *hkjit.add_rms_norm(x, r, w, 1e-6, **kw),
                         *hkjit.dropout_add_layer_norm(x, r, w, b, 0.2, 1e-5, seed=5, **kw)]
        for general, exact, packed in zip(runs[0], runs[1], runs[2]):
            assert np.array_equal(general, exact) and np.array_equal(general, packed)
        assert rel_err(runs[1][0], layer_norm_ref(x, w, b, 1e-5)) < TOL[dtype]


@needs_clang
def test_dropout_mask_depends_on_seed_and_index_only(cache_dir):
    shape, p = (6, 700), 0.3
    x, r = rand(shape, "float32"), rand(shape, "float32")
    w, b = rng.random(700).astype(np.float32) + 0.5, rand((700,), "float32")
    runs = [hkjit.dropout_add_layer_norm(x, r, w, b, p, seed=2 ** 40 + 7, device=dev, **tiles)[1]
            for dev, tiles in (("sim:gfx950", {}), ("sim:gfx942", {}),
                               ("sim:gfx950", dict(threads=64, row_threads=16, chunks=1)))]
    assert np.array_equal(runs[0], runs[1]) and np.array_equal(runs[0], runs[2])
    kept = runs[0] != r
    dropped_ok = np.array_equal(runs[0][~kept], r[~kept])
    scaled = (np.asarray(x, F64) / (1 - p)).astype(np.float32) + np.asarray(r, F64)
    assert dropped_ok and np.allclose(runs[0][kept], scaled.astype(np.float32)[kept], rtol=1e-6, atol=1e-6)
    n = kept.size
    assert abs(kept.sum() - n * (1 - p)) < 5 * np.sqrt(n * p * (1 - p))        # 5 sigma
    other = hkjit.dropout_add_layer_norm(x, r, w, b, p, seed=8, device="sim:gfx950")[1]
    assert not np.array_equal(other, runs[0])
    assert np.array_equal(kept, _documented_mask(2 ** 40 + 7, shape, p))


def _documented_mask(seed, shape, p):
    """The keep mask as kernel_sources/norm.cuh documents it, in NumPy: element (r, c) is kept iff
    (hash(seed, r * cols + c) >> 8) / 2^24 >= p (the kernel compares integers; same mask)."""
    M = np.uint64(0xFFFFFFFF)

    def fmix(h):
        h = h ^ (h >> np.uint64(16))
        h = (h * np.uint64(0x85EBCA6B)) & M
        h = h ^ (h >> np.uint64(13))
        h = (h * np.uint64(0xC2B2AE35)) & M
        return h ^ (h >> np.uint64(16))
    rows, cols = shape
    base = np.arange(rows, dtype=np.uint64) * np.uint64(cols)
    s_lo, s_hi = np.uint64(seed & 0xFFFFFFFF), np.uint64(seed >> 32)
    key = (fmix(fmix(s_lo ^ fmix(s_hi)) ^ (base >> np.uint64(32))) + (base & M)) & M
    h = fmix((((key[:, None] + np.arange(cols, dtype=np.uint64)[None, :]) & M) * np.uint64(0x9E3779B9)) & M)
    return (h >> np.uint64(8)).astype(np.float32) * np.float32(2.0 ** -24) >= np.float32(p)


def test_bad_input_is_refused_before_compiling(cache_dir):
    x, r = rand((4, 9), "float16"), rand((4, 9), "float16")
    w, b = rand((9,), "float16"), rand((9,), "float16")
    dev = "sim:gfx950"
    with pytest.raises(InvalidArgumentError, match="residual has shape"):
        hkjit.add_rms_norm(x, r[:, :8], w, device=dev)
    with pytest.raises(DTypeError, match="weight"):
        hkjit.layer_norm(x, w.astype(np.float32), b, device=dev)
    with pytest.raises(InvalidArgumentError, match="contiguous"):
        hkjit.layer_norm(x, w[:4], b, device=dev)
    with pytest.raises(InvalidArgumentError, match="drop probability"):
        hkjit.dropout_add_layer_norm(x, r, w, b, 1.0, seed=1, device=dev)
    with pytest.raises(InvalidArgumentError, match="seed"):
        hkjit.dropout_add_layer_norm(x, r, w, b, 0.1, seed=-1, device=dev)
    with pytest.raises(InvalidArgumentError, match="seed"):
        hkjit.dropout_add_layer_norm(x, r, w, b, 0.1, seed=2 ** 64, device=dev)
    with pytest.raises(InvalidArgumentError, match="eps"):
        hkjit.layer_norm(x, w, b, -1.0, device=dev)
    with pytest.raises(DTypeError):
        hkjit.layer_norm(x.astype(np.int32), device=dev)
    with pytest.raises(InvalidArgumentError, match="layer_norm: vec"):
        hkjit.build("layer_norm", target="gfx950", rows=4, hidden=8, dtype="float32", vec=8)
    with pytest.raises(InvalidArgumentError, match="packed_wb=1 is a choice of the exact path"):
        hkjit.build("layer_norm", target="sm_90a", rows=4, hidden=100, packed_wb=1)
    with pytest.raises(InvalidArgumentError, match="packed_wb=2; 0 or 1"):
        hkjit.build("layer_norm", target="sm_90a", rows=4, hidden=128, packed_wb=2)
    assert not list(cache_dir.rglob("*.co"))


def test_args_layout():
    offsets = [getattr(norms_mod.Args, f).offset for f, _ in norms_mod.Args._fields_]
    assert offsets == [0, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 92, 96, 100, 104]
    assert ctypes.sizeof(norms_mod.Args) == 112


STATIC = [("layer_norm", 16384, 4096, "bfloat16"), ("add_rms_norm", 16384, 8192, "bfloat16"),
          ("dropout_add_layer_norm", 65536, 128, "bfloat16"), ("layer_norm", 128, 65536, "float32")]


@needs_clang
@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
@pytest.mark.parametrize("op,rows,hidden,dtype", STATIC)
def test_amd_static(cache_dir, arch, op, rows, hidden, dtype):
    report = hkjit.inspect(op, arch, rows=rows, hidden=hidden, dtype=dtype)
    assert report["spills"] == 0 and report["scratch_bytes"] == 0, report
    mix = report.get("instruction_mix")
    if mix:
        assert mix["classes"].get("load_16B", 0) > 0, mix["classes"]


@needs_nvrtc
def test_nvrtc_static_packed_wb():
    """packed_wb=1 at 128 columns: no spills, fewer registers than fp32 weight and bias (NVRTC 13.5,
    dropout_add_layer_norm 16384 x 128: 55 -> 48)."""
    kw = dict(rows=16384, hidden=128, dtype="bfloat16")
    packed = nvrtc_compile_op("dropout_add_layer_norm", packed_wb=1, **kw)
    fp32 = nvrtc_compile_op("dropout_add_layer_norm", **kw)
    assert packed.meta["spills"] == 0 and packed.meta["stack_bytes"] == 0, packed.log
    assert packed.meta["registers"] < fp32.meta["registers"]


@needs_nvrtc
@pytest.mark.parametrize("op,rows,hidden,dtype", STATIC)
def test_nvrtc_static(op, rows, hidden, dtype):
    result = nvrtc_compile_op(op, rows=rows, hidden=hidden, dtype=dtype)
    assert result.meta["spills"] == 0 and result.meta["stack_bytes"] == 0, result.log
    assert "ld.global.v4" in result.ptx and "st.global.v4" in result.ptx


@needs_nvrtc
@pytest.mark.parametrize("op", ["layer_norm", "add_rms_norm", "dropout_add_layer_norm"])
@pytest.mark.parametrize("hidden,dtype", [(512, "bfloat16"), (768, "bfloat16"), (1024, "bfloat16"),
                                          (2048, "bfloat16"), (1024, "float32")])
def test_nvrtc_default_schedules_do_not_spill_at_model_widths(op, hidden, dtype):
    """The sm_90a default schedule of each fused norm at the hidden sizes of common models: no spill
    under the register cap (LayerNorm at 1024 bf16 columns, exact rows of 32 elements a thread,
    spilled 980 bytes before the exact path was limited to 16 and the row group widened)."""
    result = nvrtc_compile_op(op, rows=4096, hidden=hidden, dtype=dtype)
    assert result.meta["spills"] == 0 and result.meta["stack_bytes"] == 0, result.log


# --- on the GPU --------------------------------------------------------------------------------
GPU_CASES = [((1, 1), "float32"), ((3, 129), "bfloat16"), ((4097, 5000), "bfloat16"), ((2, 65536), "float16"),
             ((3, 65536), "float32"), ((16384, 128), "bfloat16"), ((4, 3, 4096), "float16"),
             ((131, 128), "bfloat16"), ((1001, 64), "float32")]     # exact rows (sm_90a default) from (16384, 128) on


@pytest.mark.gpu
@pytest.mark.skipif(not HAVE_GPU, reason="no CUDA GPU here")
@pytest.mark.parametrize("shape,dtype", GPU_CASES)
def test_gpu(shape, dtype):
    import torch
    F = torch.nn.functional
    dt = getattr(torch, dtype)
    x = torch.randn(shape, device="cuda", dtype=dt) * 2 + 10
    r = torch.randn(shape, device="cuda", dtype=dt)
    w = torch.rand(shape[-1], device="cuda", dtype=dt) + 0.5
    b = torch.randn(shape[-1], device="cuda", dtype=dt)
    tol = TOL[dtype] * (5 if dtype == "float32" else 1)

    def err(got, ref):
        assert torch.isfinite(got).all()
        return ((got.double() - ref.double()).norm() / ref.double().norm()).item()
    out = torch.full_like(x, float("nan"))
    hkjit.layer_norm(x, w, b, 1e-5, out=out)
    assert err(out, F.layer_norm(x.double(), shape[-1:], w.double(), b.double(), 1e-5)) < tol
    s_ref = (x.double() + r.double()).to(dt)
    y, s = hkjit.add_rms_norm(x, r, w, 1e-6)
    assert torch.equal(s, s_ref)
    assert err(y, F.rms_norm(s_ref.double(), shape[-1:], w.double(), 1e-6)) < tol
    yd, sd = hkjit.dropout_add_layer_norm(x, r, w, b, 0.0, 1e-5, seed=11)
    assert torch.equal(sd, s_ref)              # p = 0: the sum exactly (the norm has its own schedule)
    assert err(yd, F.layer_norm(s_ref.double(), shape[-1:], w.double(), b.double(), 1e-5)) < tol
    yd, sd = hkjit.dropout_add_layer_norm(x, r, w, b, 0.25, 1e-5, seed=11)
    kept = (sd != r).double().mean().item()
    n = sd.numel()
    assert abs(kept - 0.75) * n < 5 * (n * 0.25 * 0.75) ** 0.5 + 1
    assert torch.equal(sd, hkjit.dropout_add_layer_norm(x, r, w, b, 0.25, 1e-5, seed=11)[1])
    rows = x.numel() // shape[-1]
    if hkjit.ops.get("layer_norm").plan("sm_90a", rows=rows, hidden=shape[-1], dtype=dtype).config["exact"]:
        # The general path (on sm_90a NVRTC fuses the exact path's squared deviations into FMAs,
        # which the general path's padding mask prevents: the last bit may differ), then a
        # persistent grid of the exact path itself (the same bits).
        assert err(hkjit.layer_norm(x, w, b, 1e-5, exact=0), out.double()) < tol
        assert err(hkjit.dropout_add_layer_norm(x, r, w, b, 0.25, 1e-5, seed=11, exact=0)[0], yd.double()) < tol
        assert torch.equal(hkjit.add_rms_norm(x, r, w, 1e-6, exact=0)[1], s)
        assert err(hkjit.add_rms_norm(x, r, w, 1e-6, exact=0)[0], y.double()) < tol
        assert torch.equal(hkjit.layer_norm(x, w, b, 1e-5, blocks=3), out)
        assert torch.equal(hkjit.dropout_add_layer_norm(x, r, w, b, 0.25, 1e-5, seed=11, blocks=3)[0], yd)
        assert torch.equal(hkjit.add_rms_norm(x, r, w, 1e-6, blocks=3)[0], y)
