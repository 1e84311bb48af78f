"""hkjit.rms_norm through the op layer: every dtype, ragged and strided shapes, in place, on both
simulated CDNA targets (CI) and on a Hopper GPU (skipped without one); bad input refused before
anything compiles; static figures on every target."""
import numpy as np
import pytest

import hkjit
from hkjit import interop, jit
from hkjit.errors import DTypeError, InvalidArgumentError

from conftest import HAVE_GPU, needs_clang, needs_nvrtc

ml_dtypes = pytest.importorskip("ml_dtypes")
rng = np.random.default_rng()
NP = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16, "float32": np.float32}
TOL = {"bfloat16": 1e-2, "float16": 2e-3, "float32": 1e-5}


def reference(x, w, eps):
    x64 = np.asarray(x, np.float64)
    return x64 / np.sqrt((x64 ** 2).mean(-1, keepdims=True) + eps) * np.asarray(w, np.float64)


def rel_err(got, ref):
    got = np.asarray(got, np.float64)
    assert np.isfinite(got).all(), "an element was never written"
    return np.linalg.norm(got - ref) / np.linalg.norm(ref)


def inputs(shape, dtype):
    x = (rng.standard_normal(shape) * rng.uniform(0.5, 3)).astype(NP[dtype])
    w = (rng.random(shape[-1]) + 0.5).astype(NP[dtype])
    return x, w


# (shape, dtype) at small ragged sizes: one row, one column, tails of every vector width, several
# leading dimensions, a row longer than one thread group holds.
SIM_CASES = [((1, 1), "float32"), ((3, 129), "bfloat16"), ((5, 1000), "float16"), ((2, 3, 77), "bfloat16"),
             ((4, 4100), "float32"), ((2, 7), "float16"), ((17, 64), "bfloat16")]


@needs_clang
@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
@pytest.mark.parametrize("shape,dtype", SIM_CASES)
def test_simulated(cache_dir, arch, shape, dtype):
    x, w = inputs(shape, dtype)
    eps = float(rng.uniform(1e-6, 1e-3))
    out = np.full(shape, np.nan, NP[dtype])
    got = hkjit.rms_norm(x, w, eps, out=out, device=f"sim:{arch}")
    assert got is out
    assert rel_err(out, reference(x, w, eps)) < TOL[dtype]


@needs_clang
@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_simulated_host_layouts_are_staged(cache_dir, arch):
    """Host arrays of any layout (strided last dimension, permuted dimensions) are staged as
    dense copies: the result is right and lands in the caller's view."""
    x = inputs((6, 40), "float32")[0][:, ::2]
    w = inputs((20,), "float32")[1]
    out = np.full((20, 6), np.nan, np.float32).T
    hkjit.rms_norm(x, w, 1e-5, out=out, device=f"sim:{arch}")
    assert rel_err(out, reference(x, w, 1e-5)) < TOL["float32"]


@needs_clang
@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_simulated_strided_rows_in_place_and_allocated(cache_dir, arch):
    wide = inputs((6, 300), "bfloat16")[0]
    x = wide[:, 10:211]                        # rows 300 apart, 201 long, misaligned base
    w = inputs((201,), "bfloat16")[1]
    ref = reference(x, w, 1e-5)
    assert rel_err(hkjit.rms_norm(x, w, 1e-5, device=f"sim:{arch}"), ref) < TOL["bfloat16"]
    y = np.array(x)                           # in place: out is x
    hkjit.rms_norm(y, w, 1e-5, out=y, device=f"sim:{arch}")
    assert rel_err(y, ref) < TOL["bfloat16"]


@needs_clang
@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_simulated_exact_rows_match_the_general_path(cache_dir, arch):
    """exact=1 (hidden == the tile's columns: rows tested only, the weight kept in registers, the
    default on sm_90a for short rows) gives the general path's bits: ragged row counts, strided
    rows, a persistent grid (the row loop after the peeled first row block), poisoned outputs."""
    dev = f"sim:{arch}"
    for (rows, hidden), dtype, tiles in (((37, 128), "bfloat16", {}),
                                         ((70, 64), "float32", dict(row_threads=16, chunks=1, blocks=3)),
                                         ((9, 1024), "bfloat16", dict(threads=128, row_threads=64, chunks=2))):
        wide = inputs((rows, hidden + 24), dtype)[0]
        x, w = wide[:, 8:8 + hidden], inputs((hidden,), dtype)[1]
        got = {}
        # (exact, weight_regs): the general path, the weight in registers, the weight read per row
        for variant in ((0, 1), (1, 1), (1, 0)):
            out = np.full((rows, hidden), np.nan, NP[dtype])
            hkjit.rms_norm(x, w, 1e-5, out=out, device=dev, exact=variant[0], weight_regs=variant[1], **tiles)
            got[variant] = out
        assert np.array_equal(got[(0, 1)], got[(1, 1)], equal_nan=False)
        assert np.array_equal(got[(0, 1)], got[(1, 0)], equal_nan=False)
        assert rel_err(got[(1, 0)], reference(x, w, 1e-5)) < TOL[dtype]


def test_exact_needs_a_row_of_the_tile_s_columns():
    with pytest.raises(InvalidArgumentError, match="exact=1; 0, or 1 when hidden \\(100\\)"):
        hkjit.build("rms_norm", target="sm_90a", rows=4, hidden=100, exact=1)
    with pytest.raises(InvalidArgumentError, match="exact=2; 0 or 1"):
        hkjit.build("rms_norm", target="sm_90a", rows=4, hidden=128, exact=2)
    with pytest.raises(InvalidArgumentError, match="weight_regs=0 is a choice of the exact path"):
        hkjit.build("rms_norm", target="sm_90a", rows=4, hidden=4096, weight_regs=0)
    for bad in (2, True, "0"):
        with pytest.raises(InvalidArgumentError, match="weight_regs=.*; 0 or 1"):
            hkjit.build("rms_norm", target="sm_90a", rows=4, hidden=128, weight_regs=bad)
    op = hkjit.ops.get("rms_norm")
    assert op.plan("sm_90a", rows=65536, hidden=128).config["exact"] == 1      # short rows: on
    assert op.plan("sm_90a", rows=4096, hidden=4096).config["exact"] == 0      # long rows: the general path
    assert op.plan("gfx942", rows=65536, hidden=128).config["exact"] == 0      # CDNA: not measured, off


def test_bad_input_is_refused_before_compiling(monkeypatch):
    def forbidden(*a, **k):
        raise AssertionError("bad input reached the compile stage")
    monkeypatch.setattr(jit, "load_spec", forbidden)
    monkeypatch.setattr(jit, "build_spec", forbidden)
    x, w = inputs((4, 8), "float16")
    with pytest.raises(InvalidArgumentError, match="contiguous \\(8,\\) vector"):
        hkjit.rms_norm(x, w[:4], device="sim:gfx950")
    with pytest.raises(DTypeError, match="weight has dtype float32"):
        hkjit.rms_norm(x, w.astype(np.float32), device="sim:gfx950")
    with pytest.raises(DTypeError, match="x has dtype int32"):
        hkjit.rms_norm(x.astype(np.int32), w, device="sim:gfx950")
    with pytest.raises(InvalidArgumentError, match="at most 65536"):
        hkjit.rms_norm(np.ones((1, 65537), np.float16), np.ones(65537, np.float16), device="sim:gfx950")
    # Device arrays are read in place, so their layout is checked (host arrays are staged as
    # dense copies first): the op's binding refuses what the kernel cannot read.
    op = hkjit.ops.get("rms_norm")

    def bind(xv):
        return op.bind({"x": interop.describe(xv), "weight": interop.describe(w), "out": None}, {}, None)
    with pytest.raises(InvalidArgumentError, match="last dimension is strided"):
        bind(inputs((4, 16), "float16")[0][:, ::2])
    with pytest.raises(InvalidArgumentError, match="does not collapse"):
        bind(inputs((4, 6, 8), "float16")[0].transpose(1, 0, 2))
    assert bind(inputs((5, 4, 20), "float16")[0][:, :, 3:11]) is None   # rows 20 apart: accepted
    with pytest.raises(InvalidArgumentError, match="out has shape"):
        hkjit.rms_norm(x, w, out=np.empty((4, 9), np.float16), device="sim:gfx950")
    with pytest.raises(InvalidArgumentError, match="eps="):
        hkjit.rms_norm(x, w, "tiny", device="sim:gfx950")
    with pytest.raises(InvalidArgumentError, match="unknown keyword"):
        hkjit.build("rms_norm", target="gfx950", rows=4, hidden=8, block_m=64)
    with pytest.raises(InvalidArgumentError, match="vec=8"):
        hkjit.build("rms_norm", target="gfx950", rows=4, hidden=8, dtype="float32", vec=8)


@needs_clang
def test_negative_eps_is_refused(cache_dir):
    x, w = inputs((4, 8), "float16")
    with pytest.raises(InvalidArgumentError, match="eps=-1.0"):
        hkjit.rms_norm(x, w, -1.0, device="sim:gfx950")


@pytest.mark.parametrize("target", [pytest.param("gfx942", marks=needs_clang), pytest.param("gfx950", marks=needs_clang),
                                    pytest.param("sm_90a", marks=needs_nvrtc)])
@pytest.mark.parametrize("hidden", [128, 4096, 65536])
def test_static_figures(cache_dir, target, hidden):
    report = hkjit.inspect("rms_norm", target, rows=16384, hidden=hidden)
    assert report["spills"] == 0 and report["params"]["vec"] == 8     # bf16, 16-byte aligned: 16-byte pieces
    mix = report.get("instruction_mix")
    if target != "sm_90a" and mix:                                    # (llvm-objdump present)
        assert mix["classes"].get("load_16B", 0) > 0, mix["classes"]


# --- on the GPU --------------------------------------------------------------------------------
GPU_CASES = [((1, 1), "float32"), ((3, 129), "bfloat16"), ((4097, 5000), "bfloat16"), ((2, 65536), "float16"),
             ((16, 8192), "float32"), ((3, 5, 1024), "float16"), ((65, 4096), "bfloat16"),
             ((4099, 128), "bfloat16"), ((129, 64), "float32")]     # the last two: exact rows (sm_90a default)


@pytest.mark.gpu
@pytest.mark.skipif(not HAVE_GPU, reason="no CUDA GPU here")
@pytest.mark.parametrize("shape,dtype", GPU_CASES)
def test_gpu(shape, dtype):
    import torch
    dt = getattr(torch, dtype)
    x = torch.randn(shape, device="cuda", dtype=dt) * 2
    w = torch.rand(shape[-1], device="cuda", dtype=dt) + 0.5
    out = torch.full(shape, float("nan"), device="cuda", dtype=dt)
    hkjit.rms_norm(x, w, 1e-5, out=out)
    ref = torch.nn.functional.rms_norm(x.float(), (shape[-1],), w.float(), 1e-5)
    assert torch.isfinite(out).all()
    assert ((out.float() - ref).norm() / ref.norm()).item() < TOL[dtype]
    again = hkjit.rms_norm(x, w, 1e-5)          # allocating, through the repeat path
    assert torch.equal(again, out)
    if hkjit.ops.get("rms_norm").plan("sm_90a", rows=x.numel() // shape[-1], hidden=shape[-1],
                                      dtype=dtype).config["exact"]:
        general = hkjit.rms_norm(x, w, 1e-5, exact=0)                            # the general path
        assert ((general.float() - out.float()).norm() / out.float().norm()).item() < TOL[dtype]
        assert torch.equal(hkjit.rms_norm(x, w, 1e-5, weight_regs=0), out)      # the weight per row: same bits
        assert torch.equal(hkjit.rms_norm(x, w, 1e-5, blocks=7), out)           # a persistent grid: same bits


@pytest.mark.gpu
@pytest.mark.skipif(not HAVE_GPU, reason="no CUDA GPU here")
@pytest.mark.parametrize("rows", [1, 4097])
def test_gpu_exact_rows_with_the_weight_read_per_row(rows):
    """exact=1 at 1024 columns (32 a thread: not the default there), the weight in registers or read per
    row (weight_regs=0): the general path's bits, ragged row counts, a persistent grid."""
    import torch
    x = torch.randn(rows, 1024, device="cuda", dtype=torch.bfloat16) * 2
    w = torch.rand(1024, device="cuda", dtype=torch.bfloat16) + 0.5
    want = hkjit.rms_norm(x, w, 1e-5)
    ref = torch.nn.functional.rms_norm(x.float(), (1024,), w.float(), 1e-5)
    assert ((want.float() - ref).norm() / ref.norm()).item() < TOL["bfloat16"]
    for tiles in (dict(exact=1), dict(exact=1, weight_regs=0), dict(exact=1, weight_regs=0, blocks=5)):
        out = torch.full_like(x, float("nan"))
        hkjit.rms_norm(x, w, 1e-5, out=out, **tiles)
        assert torch.equal(out, want), tiles


@pytest.mark.gpu
@pytest.mark.skipif(not HAVE_GPU, reason="no CUDA GPU here")
def test_gpu_strided_rows_and_numpy_inputs():
    import torch
    wide = torch.randn(64, 3000, device="cuda", dtype=torch.bfloat16)
    x = wide[:, 5:2053]
    w = torch.rand(2048, device="cuda", dtype=torch.bfloat16) + 0.5
    ref = torch.nn.functional.rms_norm(x.float(), (2048,), w.float(), 1e-6)
    got = hkjit.rms_norm(x, w)
    assert ((got.float() - ref).norm() / ref.norm()).item() < 1e-2
    xn, wn = inputs((33, 1000), "float32")
    assert rel_err(hkjit.rms_norm(xn, wn, device="cuda:0"), reference(xn, wn, 1e-6)) < 1e-5
