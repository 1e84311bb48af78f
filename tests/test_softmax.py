"""hkjit.softmax (kernel_sources/softmax.cuh): simulator correctness on gfx942 and gfx950 against
float64 NumPy for both schedules (row in registers; row read twice with the online max/sum), -inf /
NaN / +inf rows, strided rows and in place; bad input refused before compiling; static figures on
every target; a GPU run against torch in float32 (skipped without a GPU)."""
import ctypes

import numpy as np
import pytest

import hkjit
from hkjit import interop, jit
from hkjit.errors import DTypeError, InvalidArgumentError
from hkjit.ops import softmax as softmax_mod

from conftest import HAVE_GPU, needs_clang, needs_nvrtc, nvrtc_compile_op

ml_dtypes = pytest.importorskip("ml_dtypes")
rng = np.random.default_rng()
NP = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16, "float32": np.float32}
TOL = {"bfloat16": 1e-2, "float16": 2e-3, "float32": 1e-5}


def reference(x, scale=1.0):
    z = np.asarray(x, np.float64) * scale
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def rel_err(got, ref):
    got = np.asarray(got, np.float64)
    assert np.isfinite(got).all(), "an element was never written"
    return np.linalg.norm(got - ref) / np.linalg.norm(ref)


def random(shape, dtype):
    return (rng.standard_normal(shape) * rng.uniform(1, 4)).astype(NP[dtype])


# (shape, dtype, tile overrides): ragged rows in registers; rows longer than the tile (read twice).
SIM_CASES = [((1, 1), "float32", {}), ((3, 129), "bfloat16", {}), ((5, 1000), "float16", {}),
             ((2, 3, 77), "bfloat16", {}), ((3, 5000), "float32", {}),
             ((3, 700), "float32", {"threads": 64, "row_threads": 64, "chunks": 2}),
             ((4, 300), "bfloat16", {"threads": 128, "row_threads": 128, "chunks": 1})]


@needs_clang
@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
@pytest.mark.parametrize("shape,dtype,tiles", SIM_CASES)
def test_simulated(cache_dir, arch, shape, dtype, tiles):
    x = random(shape, dtype)
    scale = float(rng.uniform(0.2, 2))
    out = np.full(shape, np.nan, NP[dtype])
    assert hkjit.softmax(x, scale=scale, out=out, device=f"sim:{arch}", **tiles) is out
    assert rel_err(out, reference(x, scale)) < TOL[dtype]


@needs_clang
@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
@pytest.mark.parametrize("tiles", [{}, {"threads": 64, "row_threads": 64, "chunks": 1}], ids=["one_pass", "two_pass"])
def test_special_rows_simulated(cache_dir, arch, tiles):
    """A row of only -inf gives zeros (torch: NaN); a NaN or a +inf makes its row NaN (as torch);
    -inf entries among finite ones give exact zeros."""
    x = random((5, 300), "float32")
    x[1] = -np.inf
    x[2, 5] = np.nan
    x[3, 7] = np.inf
    x[4, ::3] = -np.inf
    y = hkjit.softmax(x, device=f"sim:{arch}", **tiles)
    assert np.all(y[1] == 0) and np.isnan(y[2]).all() and np.isnan(y[3]).all()
    assert np.all(y[4, ::3] == 0)
    for r in (0, 4):
        assert rel_err(y[r], reference(x[r])) < TOL["float32"]


@needs_clang
@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_strided_rows_and_in_place_simulated(cache_dir, arch):
    wide = random((6, 300), "bfloat16")
    x = wide[:, 10:211]
    ref = reference(x)
    assert rel_err(hkjit.softmax(x, device=f"sim:{arch}"), ref) < TOL["bfloat16"]
    y = np.array(x)
    hkjit.softmax(y, out=y, device=f"sim:{arch}")
    assert rel_err(y, ref) < TOL["bfloat16"]


@needs_clang
@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
@pytest.mark.parametrize("shape,dtype,tiles", [
    ((37, 128), "bfloat16", {"threads": 256, "row_threads": 8, "chunks": 2}),
    ((5, 64), "float32", {"threads": 64, "row_threads": 8, "group_rows": 2, "chunks": 2})])
def test_exact_rows_simulated(cache_dir, arch, shape, dtype, tiles):
    """exact=1 (rows of exactly the tile's columns: rows tested only) gives the general path's bits,
    ragged last row block included; a -inf row still gives zeros."""
    x = random(shape, dtype)
    x[1] = -np.inf
    outs = []
    for exact in (0, 1):
        out = np.full(shape, np.nan, NP[dtype])
        hkjit.softmax(x, scale=0.7, out=out, device=f"sim:{arch}", exact=exact, **tiles)
        outs.append(out)
    assert np.array_equal(outs[0].view(np.uint8), outs[1].view(np.uint8))
    assert np.all(outs[1][1] == 0)
    rest = np.arange(shape[0]) != 1
    assert rel_err(outs[1][rest], reference(x[rest], 0.7)) < TOL[dtype]


def test_exact_needs_rows_of_the_tile(cache_dir):
    with pytest.raises(InvalidArgumentError, match="exact=1 needs hidden \\(100\\)"):
        hkjit.build("softmax", target="sm_90a", rows=4, hidden=100, exact=1)
    with pytest.raises(InvalidArgumentError, match="exact=2; 0 or 1"):
        hkjit.build("softmax", target="sm_90a", rows=4, hidden=128, exact=2)


def test_bad_input_is_refused_before_compiling(monkeypatch):
    def forbidden(*a, **k):
        raise AssertionError("bad input reached the compile stage")
    monkeypatch.setattr(jit, "load_spec", forbidden)
    monkeypatch.setattr(jit, "build_spec", forbidden)
    x = random((4, 8), "float16")
    with pytest.raises(DTypeError, match="x has dtype int64"):
        hkjit.softmax(x.astype(np.int64), device="sim:gfx950")
    with pytest.raises(InvalidArgumentError, match="out has shape"):
        hkjit.softmax(x, out=np.empty((4, 9), np.float16), device="sim:gfx950")
    with pytest.raises(DTypeError, match="out has dtype float32"):
        hkjit.softmax(x, out=np.empty((4, 8), np.float32), device="sim:gfx950")
    with pytest.raises(InvalidArgumentError, match="scale=inf"):
        hkjit.softmax(x, scale=float("inf"), device="sim:gfx950")
    with pytest.raises(InvalidArgumentError, match="scale='2'"):
        hkjit.softmax(x, scale="2", device="sim:gfx950")
    with pytest.raises(InvalidArgumentError, match="at most 65536"):
        hkjit.softmax(np.ones((1, 65537), np.float16), device="sim:gfx950")
    op = hkjit.ops.get("softmax")

    def bind(xv):
        return op.bind({"x": interop.describe(xv), "out": None}, {}, None)
    with pytest.raises(InvalidArgumentError, match="last dimension is strided"):
        bind(random((4, 16), "float16")[:, ::2])
    with pytest.raises(InvalidArgumentError, match="does not collapse"):
        bind(random((4, 6, 8), "float16").transpose(1, 0, 2))
    with pytest.raises(InvalidArgumentError, match="row_threads=48"):
        hkjit.build("softmax", target="gfx950", rows=4, hidden=8, row_threads=48)
    with pytest.raises(InvalidArgumentError, match="vec=8"):
        hkjit.build("softmax", target="sm_90a", rows=4, hidden=8, dtype="float32", vec=8)
    with pytest.raises(InvalidArgumentError, match="hidden=70000"):
        hkjit.build("softmax", target="gfx942", rows=4, hidden=70000)


@needs_clang
def test_scale_overflowing_log2e_is_refused(cache_dir):
    with pytest.raises(InvalidArgumentError, match="overflows"):
        hkjit.softmax(random((2, 8), "float32"), scale=3e38, device="sim:gfx950")


# --- static figures ------------------------------------------------------------------------------
STATIC = [(16384, 128, "bfloat16"), (16384, 4096, "bfloat16"), (16384, 8192, "bfloat16"), (128, 65536, "bfloat16"),
          (4096, 65536, "float32"), (4097, 5000, "float16")]


@needs_clang
@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
@pytest.mark.parametrize("rows,hidden,dtype", STATIC)
def test_amd_static(cache_dir, arch, rows, hidden, dtype):
    report = hkjit.inspect("softmax", arch, rows=rows, hidden=hidden, dtype=dtype)
    assert report["spills"] == 0 and report["scratch_bytes"] == 0
    assert report["kernarg_bytes"] >= ctypes.sizeof(softmax_mod.Args)
    mix = report.get("instruction_mix")
    if mix:
        assert mix["classes"].get("load_16B", 0) > 0, mix["classes"]


@needs_nvrtc
@pytest.mark.parametrize("tiles", [{"exact": 1}, {"exact": 1, "threads": 64, "row_threads": 16, "chunks": 1}])
def test_nvrtc_static_exact(tiles):
    """The exact path at 128 columns: no spills, 16-byte accesses, none element by element."""
    result = nvrtc_compile_op("softmax", rows=4096, hidden=128, dtype="bfloat16", **tiles)
    assert result.meta["spills"] == 0 and result.meta["stack_bytes"] == 0, result.log
    assert "ld.global.v4.b32" in result.ptx and "st.global.v4.b32" in result.ptx
    assert "ld.global.u16" not in result.ptx and "ld.global.b16" not in result.ptx


@needs_nvrtc
@pytest.mark.parametrize("rows,hidden,dtype", STATIC)
def test_nvrtc_static(rows, hidden, dtype):
    result = nvrtc_compile_op("softmax", rows=rows, hidden=hidden, dtype=dtype)
    assert result.meta["spills"] == 0 and result.meta["stack_bytes"] == 0, result.log
    assert "ld.global.v4.b32" in result.ptx and "st.global.v4.b32" in result.ptx


def test_args_layout_matches_the_documented_contract():
    offsets = [getattr(softmax_mod.Args, f).offset for f, _ in softmax_mod.Args._fields_]
    assert offsets == [0, 8, 16, 24, 32, 36, 40] and ctypes.sizeof(softmax_mod.Args) == 48


# --- on the GPU --------------------------------------------------------------------------------
GPU_CASES = [((1, 1), "float32"), ((3, 129), "bfloat16"), ((4097, 5000), "bfloat16"), ((2, 65536), "float16"),
             ((3, 65536), "float32"), ((16, 8192), "float32"), ((3, 5, 1024), "float16"), ((65536, 128), "bfloat16"),
             ((16384, 4096), "bfloat16")]


@pytest.mark.gpu
@pytest.mark.skipif(not HAVE_GPU, reason="no CUDA GPU here")
@pytest.mark.parametrize("shape,dtype", GPU_CASES)
def test_gpu(shape, dtype):
    import torch
    x = torch.randn(shape, device="cuda", dtype=getattr(torch, dtype)) * 3
    if shape[0] > 2:
        x[1] = -float("inf")                           # a row of only -inf
    out = torch.full(shape, float("nan"), device="cuda", dtype=x.dtype)
    hkjit.softmax(x, scale=0.7, out=out)
    ref = torch.softmax(x.float() * 0.7, dim=-1)
    finite = ref.isfinite().all(-1)                    # torch gives NaN on the -inf row
    assert torch.isfinite(out).all()
    err = ((out.float() - ref)[finite].norm() / ref[finite].norm()).item()
    assert err < TOL[dtype]
    if shape[0] > 2:
        assert not finite[1].any() and torch.all(out[1] == 0)
    again = hkjit.softmax(x, scale=0.7)                # allocating, through the repeat path
    assert torch.equal(again, out)
    y = x.clone()
    hkjit.softmax(y, scale=0.7, out=y)                 # in place
    assert torch.equal(y, out)


@pytest.mark.gpu
@pytest.mark.skipif(not HAVE_GPU, reason="no CUDA GPU here")
def test_gpu_strided_rows_nan_inf_and_numpy_inputs():
    import torch
    wide = torch.randn(64, 3000, device="cuda", dtype=torch.bfloat16)
    x = wide[:, 5:2053]
    ref = torch.softmax(x.float(), -1)
    assert ((hkjit.softmax(x).float() - ref).norm() / ref.norm()).item() < 1e-2
    z = torch.randn(4, 40000, device="cuda")
    z[0, 3], z[1, 9] = float("nan"), float("inf")
    got, ref = hkjit.softmax(z), torch.softmax(z, -1)
    assert torch.isnan(got[:2]).all() and torch.isnan(ref[:2]).all()
    assert ((got[2:] - ref[2:]).norm() / ref[2:].norm()).item() < 1e-5
    xn = random((33, 1000), "float32")
    assert rel_err(hkjit.softmax(xn, device="cuda:0"), reference(xn)) < 1e-5


@needs_clang
def test_bench_peers_compute_the_op(cache_dir):
    torch = pytest.importorskip("torch")
    op = hkjit.ops.get("softmax")
    x = torch.randn(5, 66) * 3
    got = hkjit.softmax(x, device="sim:gfx950")
    ref = op.bench_peers(torch)["torch eager"](x.double())
    assert ((got.double() - ref).norm() / ref.norm()).item() < 1e-5
    case = op.bench_cases(quick=True)[0]
    assert op.bench_bytes(case) == 2 * case["rows"] * case["hidden"] * 2
