"""hkjit.silu / gelu / gelu_tanh / relu / tanh / silu_and_mul / gelu_and_mul (kernel_sources/eltwise.cuh):
simulator correctness on gfx942 and gfx950 against float64 NumPy (ragged, strided, in place,
poisoned outputs), bad input refused before anything compiles, static figures on every target
(0 spills, 16-byte accesses), and a GPU run against torch in float32 (skipped without a GPU)."""
import ctypes
import functools
import math

import numpy as np
import pytest

import hkjit
from hkjit import interop, jit
from hkjit.errors import DTypeError, InvalidArgumentError
from hkjit.ops import activations

from conftest import HAVE_GPU, needs_clang, needs_nvrtc, nvrtc_compile_op

ml_dtypes = pytest.importorskip("ml_dtypes")
rng = np.random.default_rng()
NP = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16, "float32": np.float32}
TOL = {"bfloat16": 1e-2, "float16": 2e-3, "float32": 1e-5}
_erf = np.vectorize(math.erf)


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


ACT = {"silu": lambda x: x / (1 + np.exp(-x)), "gelu": lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2))),
       "gelu_tanh": _gelu_tanh, "relu": lambda x: np.maximum(x, 0), "tanh": np.tanh}
UNARY = tuple(ACT)


def reference(name, x, approximate="none"):
    x64 = np.asarray(x, np.float64)
    if name == "silu_and_mul":
        d = x.shape[-1] // 2
        return ACT["silu"](x64[..., :d]) * x64[..., d:]
    if name == "gelu_and_mul":
        d = x.shape[-1] // 2
        return ACT["gelu" if approximate == "none" else "gelu_tanh"](x64[..., :d]) * x64[..., d:]
    return ACT[name](x64)


def rel_err(got, ref):
    got = np.asarray(got, np.float64)
    assert np.isfinite(got).all(), "an element was never written"
    return np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-30)    # relu of one negative: 0 / 0


def random(shape, dtype):
    return (rng.standard_normal(shape) * rng.uniform(1, 4)).astype(NP[dtype])


# Small ragged shapes spread over the ops (each op meets several): one element, tails of every
# vector width, several leading dimensions, a row longer than a 256-thread block step holds.
SHAPES = [((1, 1), "float32"), ((3, 129), "bfloat16"), ((5, 1000), "float16"), ((2, 3, 77), "bfloat16"),
          ((2, 9000), "float32")]
SIM_CASES = [(op, *SHAPES[(i + k) % len(SHAPES)]) for i, op in enumerate(UNARY) for k in (0, 2)]


@needs_clang
@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
@pytest.mark.parametrize("name,shape,dtype", SIM_CASES)
def test_unary_simulated(cache_dir, arch, name, shape, dtype):
    x = random(shape, dtype)
    out = np.full(shape, np.nan, NP[dtype])
    assert getattr(hkjit, name)(x, out=out, device=f"sim:{arch}") is out
    assert rel_err(out, reference(name, x)) < TOL[dtype]


@needs_clang
@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
@pytest.mark.parametrize("name,approximate,shape,dtype", [
    ("silu_and_mul", "none", (3, 258), "bfloat16"), ("silu_and_mul", "none", (2, 3, 2000), "float32"),
    ("gelu_and_mul", "none", (5, 154), "float16"), ("gelu_and_mul", "tanh", (1, 2), "float32")])
def test_gated_simulated(cache_dir, arch, name, approximate, shape, dtype):
    x = random(shape, dtype)
    out = np.full(shape[:-1] + (shape[-1] // 2,), np.nan, NP[dtype])
    kw = {"approximate": approximate} if name == "gelu_and_mul" else {}
    getattr(hkjit, name)(x, out=out, device=f"sim:{arch}", **kw)
    assert rel_err(out, reference(name, x, approximate)) < TOL[dtype]
    fresh = getattr(hkjit, name)(x, device=f"sim:{arch}", **kw)         # allocated output
    assert fresh.shape == out.shape and np.array_equal(fresh, out)


@needs_clang
@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_strided_rows_in_place_and_schedules_simulated(cache_dir, arch):
    """Rows with a stride (as a device view is read in place: no staging copy), in place, and
    tile overrides that force several rows per group and column blocks."""
    from hkjit import runtime
    dev = runtime.from_string(f"sim:{arch}")
    wide = random((6, 300), "bfloat16")
    x = np.ascontiguousarray(wide)
    xd = dev.alloc(x.nbytes)
    dev.copy_in(xd, x.ctypes.data, x.nbytes)
    view = interop.Array(xd + 20, (6, 201), (300, 1), interop.describe(x).dtype, dev.kind, 0, "staged", None)
    op = hkjit.ops.get("tanh")
    binding = op.bind({"x": view, "out": view}, {}, dev)                  # in place, rows 300 apart
    assert binding.request["strided"] and binding.request["align"] == 4    # 20-byte offset: 2-element pieces
    ref = reference("tanh", wide[:, 10:211])
    for tiles in ({}, {"row_threads": 16, "group_rows": 3, "chunks": 2}):
        dev.copy_in(xd, x.ctypes.data, x.nbytes)
        plan = op.plan(dev.target, **binding.request, **tiles)
        kernel = jit.load_spec(plan.spec, dev)
        args = plan.fill(**binding.args({"x": xd + 20, "out": xd + 20, "workspace": 0}, ()))
        kernel.launch_packed(plan.grid, (plan.threads, 1, 1), 0, kernel.pack(args), 0)
        dev.synchronize(0)
        got = np.empty_like(x)
        dev.copy_out(got.ctypes.data, xd, x.nbytes)
        assert rel_err(got[:, 10:211], ref) < TOL["bfloat16"]
        assert np.array_equal(got[:, :10], x[:, :10]) and np.array_equal(got[:, 211:], x[:, 211:])
    dev.free(xd)


@needs_clang
@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
@pytest.mark.parametrize("name,shape,dtype,tiles", [
    ("silu_and_mul", (37, 256), "bfloat16", {"threads": 256, "row_threads": 8, "chunks": 2}),
    ("gelu_and_mul", (9, 64), "float32", {"threads": 64, "row_threads": 4, "group_rows": 2, "chunks": 2}),
    ("silu_and_mul", (7, 3, 32), "float16", {"threads": 64, "row_threads": 2, "chunks": 1})])
def test_exact_rows_simulated(cache_dir, arch, name, shape, dtype, tiles):
    """exact=1 (rows of exactly the tile's columns: rows tested only, no division of the tile
    index) gives the general path's results, ragged last row block included, to within what a
    different contraction of the activation's multiply-adds can move (the compiler may fuse them
    differently once the loads' branches are gone). silu: 2 ULPs. fp32 gelu: erfc(a) = t exp2(P(t)
    - a^2) puts the rounding of a^2 and of the Horner steps into the exponent, so fused against
    unfused differ by up to (4 + x^2) ULPs relative (a float32 model of both evaluations over
    |x| <= 9 stays within 0.72 of that), one more for the product with the up half; a CI run saw
    2.2 ULPs at x = 0.07. Half types: 2 ULPs of the output type (one rounding can flip)."""
    x = random(shape, dtype)
    d = x.shape[-1] // 2
    outs = []
    for exact in (0, 1):
        out = np.full(x.shape[:-1] + (d,), np.nan, NP[dtype])
        getattr(hkjit, name)(x, out=out, device=f"sim:{arch}", exact=exact, **tiles)
        outs.append(out)
    ulp = {"bfloat16": 2.0 ** -7, "float16": 2.0 ** -10, "float32": 2.0 ** -23}[dtype]     # (relative, at most)
    ulps = 2.0
    if dtype == "float32" and name == "gelu_and_mul":
        ulps = 5.0 + np.asarray(x[..., :d], np.float64) ** 2
    got, general = np.asarray(outs[1], np.float64), np.asarray(outs[0], np.float64)
    assert np.all(np.abs(got - general) <= ulps * ulp * np.abs(general)), np.max(np.abs(got - general) / np.abs(general)) / ulp
    assert rel_err(outs[1], reference(name, x)) < TOL[dtype]


def test_exact_needs_rows_of_the_tile(cache_dir):
    with pytest.raises(InvalidArgumentError, match="exact=1 needs rows of exactly the tile's columns"):
        hkjit.build("silu_and_mul", target="sm_90a", rows=4, cols=100, exact=1)
    with pytest.raises(InvalidArgumentError, match="exact=1 needs rows"):      # contiguous: one long row
        hkjit.build("silu", target="sm_90a", rows=4, cols=128, exact=1, row_threads=8, chunks=2)


@needs_clang
@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
@pytest.mark.parametrize("name,shape,dtype", [("gelu", (3, 1029), "bfloat16"), ("gelu", (2, 77), "float16"),
                                              ("gelu_and_mul", (9, 514), "bfloat16"), ("gelu_and_mul", (5, 66), "float16")])
def test_fast_erf_simulated(cache_dir, arch, name, shape, dtype):
    """fast_erf=1 (erfc by 6 coefficients, about 2.5e-5 relative in fp32): within the dtype's tolerance of
    the float64 reference, and at most one output rounding away from the 10-coefficient form's result
    (the two fp32 values differ by far less than half an output ULP, so only a value next to a rounding
    boundary can round the other way), ragged shapes, outputs poisoned first; inputs spread to |x| ~ 12
    so the tail, where erfc is small, is exercised."""
    x = (random(shape, "float32") * 2).astype(NP[dtype])
    d = x.shape[-1] // 2 if name == "gelu_and_mul" else x.shape[-1]
    outs = []
    for fast in (0, 1):
        out = np.full(x.shape[:-1] + (d,), np.nan, NP[dtype])
        assert getattr(hkjit, name)(x, out=out, device=f"sim:{arch}", fast_erf=fast) is out
        outs.append(np.asarray(out, np.float64))
    assert rel_err(outs[1], reference(name, x)) < TOL[dtype]
    ulp = {"bfloat16": 2.0 ** -7, "float16": 2.0 ** -10}[dtype]          # (relative, at most)
    assert np.all(np.abs(outs[1] - outs[0]) <= ulp * np.abs(outs[0]) + 2.0 ** -24), \
        np.max(np.abs(outs[1] - outs[0]) / np.maximum(np.abs(outs[0]), 2.0 ** -24))


def test_fast_erf_is_refused_where_there_is_no_erf_or_the_output_is_fp32(monkeypatch):
    monkeypatch.setattr(jit, "build_spec", lambda *a, **k: pytest.fail("a refused call compiled"))
    x = random((4, 8), "bfloat16")
    for call, msg in ((lambda: hkjit.silu(x, device="sim:gfx950", fast_erf=1), "only gelu with approximate='none'"),
                      (lambda: hkjit.gelu_tanh(x, device="sim:gfx950", fast_erf=1), "only gelu"),
                      (lambda: hkjit.gelu_and_mul(x, "tanh", device="sim:gfx950", fast_erf=1), "only gelu"),
                      (lambda: hkjit.gelu(x.astype(np.float32), device="sim:gfx950", fast_erf=1), "with float32"),
                      (lambda: hkjit.gelu(x, device="sim:gfx950", fast_erf=2), "fast_erf=2; 0 or 1"),
                      (lambda: hkjit.gelu(x, device="sim:gfx950", fast_erf=True), "fast_erf=True")):
        with pytest.raises(InvalidArgumentError, match=msg):
            call()
    op = hkjit.ops.get("gelu")
    spec = lambda **t: op.plan("sm_90a", rows=4, cols=8, dtype="bfloat16", **t).spec  # noqa: E731
    assert spec(fast_erf=0) == spec() != spec(fast_erf=1)                   # 0 is the default's own kernel


def test_bad_input_is_refused_before_compiling(monkeypatch):
    def forbidden(*a, **k):
        raise AssertionError("bad input reached the compile stage")
    monkeypatch.setattr(jit, "load_spec", forbidden)
    monkeypatch.setattr(jit, "build_spec", forbidden)
    x = random((4, 8), "float16")
    with pytest.raises(DTypeError, match="x has dtype int32"):
        hkjit.silu(x.astype(np.int32), device="sim:gfx950")
    with pytest.raises(InvalidArgumentError, match="out has shape"):
        hkjit.gelu(x, out=np.empty((4, 9), np.float16), device="sim:gfx950")
    with pytest.raises(DTypeError, match="out has dtype float32"):
        hkjit.relu(x, out=np.empty((4, 8), np.float32), device="sim:gfx950")
    with pytest.raises(InvalidArgumentError, match="must be even"):
        hkjit.silu_and_mul(random((4, 7), "float16"), device="sim:gfx950")
    with pytest.raises(InvalidArgumentError, match="out has shape \\(4, 8\\); it must be \\(4, 4\\)"):
        hkjit.silu_and_mul(x, out=np.empty((4, 8), np.float16), device="sim:gfx950")
    with pytest.raises(InvalidArgumentError, match="approximate='fast'"):
        hkjit.gelu_and_mul(x, "fast", device="sim:gfx950")
    with pytest.raises(InvalidArgumentError, match="at least one element"):
        hkjit.tanh(np.empty((0, 4), np.float32), device="sim:gfx950")
    ro = random((4, 8), "float32")
    ro.flags.writeable = False
    with pytest.raises(InvalidArgumentError, match="out is read-only"):
        hkjit.silu(random((4, 8), "float32"), out=ro, device="sim:gfx950")
    op = hkjit.ops.get("silu")

    def bind(xv):
        return op.bind({"x": interop.describe(xv), "out": None}, {}, None)
    with pytest.raises(InvalidArgumentError, match="last dimension is strided"):
        bind(random((4, 16), "float16")[:, ::2])
    with pytest.raises(InvalidArgumentError, match="does not collapse"):
        bind(random((4, 6, 8), "float16").transpose(1, 0, 2))
    assert bind(random((5, 4, 20), "float16")[:, :, 3:11]) is None     # rows 20 apart: accepted
    with pytest.raises(InvalidArgumentError, match="unknown keyword"):
        hkjit.build("silu", target="gfx950", rows=4, cols=8, block_m=64)
    with pytest.raises(InvalidArgumentError, match="vec=8"):
        hkjit.build("silu_and_mul", target="gfx950", rows=4, cols=8, dtype="float32", vec=8)
    with pytest.raises(InvalidArgumentError, match="row_threads=24"):
        hkjit.build("gelu", target="gfx950", rows=4, cols=8, row_threads=24)
    with pytest.raises(InvalidArgumentError, match="threads=96"):
        hkjit.build("tanh", target="sm_90a", rows=4, cols=8, threads=96)
    with pytest.raises(InvalidArgumentError, match="chunks=0"):
        hkjit.build("relu", target="gfx942", rows=4, cols=8, chunks=0)


# --- static figures ------------------------------------------------------------------------------
STATIC = [("silu", 16384, 4096, False), ("silu", 16384, 4096, True), ("gelu", 16384, 8192, False),
          ("gelu_tanh", 16384, 4096, False), ("relu", 16384, 4096, False), ("tanh", 16384, 4096, False),
          ("silu_and_mul", 4096, 128, None), ("silu_and_mul", 16384, 4096, None), ("gelu_and_mul", 4096, 8192, None)]


def _layout(strided):
    return {} if strided is None else {"strided": strided}     # (gated ops have no flat layout)


@needs_clang
@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
@pytest.mark.parametrize("name,rows,cols,strided", STATIC)
def test_amd_static(cache_dir, arch, name, rows, cols, strided):
    report = hkjit.inspect(name, arch, rows=rows, cols=cols, **_layout(strided))
    assert report["spills"] == 0 and report["scratch_bytes"] == 0 and report["params"]["vec"] == 8
    assert report["kernarg_bytes"] >= ctypes.sizeof(activations.Args)
    mix = report.get("instruction_mix")
    if mix:                                                           # (llvm-objdump present)
        assert mix["classes"].get("load_16B", 0) > 0, mix["classes"]


@needs_nvrtc
@pytest.mark.parametrize("name,rows,cols,strided", STATIC)
def test_nvrtc_static(name, rows, cols, strided):
    result = nvrtc_compile_op(name, rows=rows, cols=cols, **_layout(strided))
    assert result.meta["spills"] == 0 and result.meta["stack_bytes"] == 0, result.log
    assert "ld.global.v4.b32" in result.ptx and "st.global.v4.b32" in result.ptx
    cfg = hkjit.ops.get(name).plan("sm_90a", rows=rows, cols=cols, **_layout(strided)).config
    assert cfg["min_blocks"] * cfg["threads"] * result.meta["registers"] <= 65536   # the register cap held


@needs_nvrtc
def test_nvrtc_static_exact():
    """silu_and_mul with rows of exactly the tile's columns (the sm_90a default there, 128 threads): no
    spills, 16-byte accesses, none element by element, fewer registers than the general path."""
    result = nvrtc_compile_op("silu_and_mul", rows=4096, cols=128)
    assert hkjit.ops.get("silu_and_mul").plan("sm_90a", rows=4096, cols=128).config["exact"] == 1
    general = nvrtc_compile_op("silu_and_mul", rows=4096, cols=128, exact=0, threads=128)
    assert result.meta["spills"] == 0 and result.meta["stack_bytes"] == 0, result.log
    assert "ld.global.v4.b32" in result.ptx and "st.global.v4.b32" in result.ptx
    assert "ld.global.u16" not in result.ptx and "ld.global.b16" not in result.ptx
    assert result.meta["registers"] < general.meta["registers"]


def test_min_blocks_is_checked():
    with pytest.raises(InvalidArgumentError, match="min_blocks=9 blocks of 256 threads"):
        hkjit.build("gelu", target="sm_90a", rows=4, cols=8, min_blocks=9)
    with pytest.raises(InvalidArgumentError, match="min_blocks=0"):
        hkjit.build("gelu", target="sm_90a", rows=4, cols=8, min_blocks=0)


def test_args_layout_matches_the_documented_contract():
    offsets = [getattr(activations.Args, f).offset for f, _ in activations.Args._fields_]
    assert offsets == [0, 8, 16, 24, 32, 36] and ctypes.sizeof(activations.Args) == 40


# --- on the GPU --------------------------------------------------------------------------------
GPU_SHAPES = [((1, 1), "float32"), ((3, 129), "bfloat16"), ((4097, 5000), "bfloat16"), ((2, 65536), "float16"),
              ((3, 5, 1024), "float32"), ((16384, 4096), "bfloat16")]


def _torch_ref(torch, name, x, approximate="none"):
    """torch's function in float64: torch's float32 gelu_tanh cancels in 1 + tanh(u) for x << 0
    (relative error ~1e-3 there), which hkjit's sigmoid form does not."""
    F = torch.nn.functional
    act = {"silu": F.silu, "gelu": F.gelu, "gelu_tanh": functools.partial(F.gelu, approximate="tanh"),
           "relu": torch.relu, "tanh": torch.tanh}
    xf = x.double()
    if name in act:
        return act[name](xf)
    d = xf.shape[-1] // 2
    fn = F.silu if name == "silu_and_mul" else functools.partial(F.gelu, approximate=approximate)
    return fn(xf[..., :d]) * xf[..., d:]


def _gpu_err(got, ref):
    import torch
    assert torch.isfinite(got).all(), "an element was never written"
    return ((got.double() - ref).norm() / ref.norm().clamp_min(1e-30)).item()


@pytest.mark.gpu
@pytest.mark.skipif(not HAVE_GPU, reason="no CUDA GPU here")
@pytest.mark.parametrize("shape,dtype", GPU_SHAPES)
@pytest.mark.parametrize("name", UNARY)
def test_gpu_unary(name, shape, dtype):
    import torch
    x = torch.randn(shape, device="cuda", dtype=getattr(torch, dtype)) * 3
    out = torch.full(shape, float("nan"), device="cuda", dtype=x.dtype)
    fn = getattr(hkjit, name)
    fn(x, out=out)
    assert _gpu_err(out, _torch_ref(torch, name, x)) < TOL[dtype]
    assert torch.equal(fn(x), out)                       # allocating, through the repeat path
    y = x.clone()
    fn(y, out=y)                                         # in place
    assert torch.equal(y, out)
    wide = torch.randn(shape[:-1] + (shape[-1] + 24,), device="cuda", dtype=x.dtype)
    view = wide[..., 8:8 + shape[-1]]                    # strided rows, read in place
    assert _gpu_err(fn(view), _torch_ref(torch, name, view)) < TOL[dtype]


@pytest.mark.gpu
@pytest.mark.skipif(not HAVE_GPU, reason="no CUDA GPU here")
@pytest.mark.parametrize("shape,dtype", [((1, 2), "float32"), ((3, 258), "bfloat16"), ((4097, 10000), "bfloat16"),
                                         ((2, 131072), "float16"), ((4096, 512), "bfloat16"),
                                         ((4, 3, 16384), "float32")])
@pytest.mark.parametrize("name,approximate", [("silu_and_mul", "none"), ("gelu_and_mul", "none"),
                                              ("gelu_and_mul", "tanh")])
def test_gpu_gated(name, approximate, shape, dtype):
    import torch
    x = torch.randn(shape, device="cuda", dtype=getattr(torch, dtype)) * 3
    kw = {"approximate": approximate} if name == "gelu_and_mul" else {}
    fn = getattr(hkjit, name)
    out = torch.full(shape[:-1] + (shape[-1] // 2,), float("nan"), device="cuda", dtype=x.dtype)
    fn(x, out=out, **kw)
    assert _gpu_err(out, _torch_ref(torch, name, x, approximate)) < TOL[dtype]
    assert torch.equal(fn(x, **kw), out)
    wide = torch.randn(shape[:-1] + (shape[-1] + 16,), device="cuda", dtype=x.dtype)
    view = wide[..., 16:]                                # strided rows
    assert _gpu_err(fn(view, **kw), _torch_ref(torch, name, view, approximate)) < TOL[dtype]


@pytest.mark.gpu
@pytest.mark.skipif(not HAVE_GPU, reason="no CUDA GPU here")
@pytest.mark.parametrize("name,shape,dtype", [("gelu", (4097, 1000), "bfloat16"), ("gelu", (3, 129), "float16"),
                                              ("gelu_and_mul", (4096, 1026), "bfloat16")])
def test_gpu_fast_erf(name, shape, dtype):
    """fast_erf=1 on the GPU: within the dtype's tolerance of torch in float64, and at most one output
    rounding from the default's result (test_fast_erf_simulated says why)."""
    import torch
    x = torch.randn(shape, device="cuda", dtype=getattr(torch, dtype)) * 4
    d = shape[-1] // 2 if name == "gelu_and_mul" else shape[-1]
    out = torch.full(shape[:-1] + (d,), float("nan"), device="cuda", dtype=x.dtype)
    getattr(hkjit, name)(x, out=out, fast_erf=1)
    assert _gpu_err(out, _torch_ref(torch, name, x)) < TOL[dtype]
    default = getattr(hkjit, name)(x).double()
    ulp = {"bfloat16": 2.0 ** -7, "float16": 2.0 ** -10}[dtype]
    assert bool(((out.double() - default).abs() <= ulp * default.abs() + 2.0 ** -24).all())


@pytest.mark.gpu
@pytest.mark.skipif(not HAVE_GPU, reason="no CUDA GPU here")
def test_gpu_numpy_inputs_and_special_values():
    import torch
    xn = random((33, 1000), "float32")
    assert rel_err(hkjit.gelu(xn, device="cuda:0"), reference("gelu", xn)) < 1e-5
    x = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 30.0, -30.0], device="cuda")
    assert torch.equal(torch.isnan(hkjit.relu(x)), torch.isnan(torch.relu(x)))
    assert torch.allclose(hkjit.tanh(x), torch.tanh(x), equal_nan=True)
    for name in ("silu", "gelu", "gelu_tanh"):
        got, ref = getattr(hkjit, name)(x[:2]), _torch_ref(torch, name, x[:2])
        assert torch.isnan(got[0]) and got[1] == ref[1] == float("inf")


@needs_clang
@pytest.mark.parametrize("name", UNARY + ("silu_and_mul", "gelu_and_mul"))
def test_bench_peers_compute_the_op(cache_dir, name):
    """`hkjit bench`'s peers (torch eager, and what torch.compile is given) are the op: they agree
    with hkjit on the simulator, and the byte count is the op's traffic."""
    torch = pytest.importorskip("torch")
    op = hkjit.ops.get(name)
    x = torch.randn(5, 66) * 3
    got = getattr(hkjit, name)(x, device="sim:gfx950")
    eager = op.bench_peers(torch)["torch eager"]
    ref = eager(x.double())
    assert got.shape == ref.shape and ((got.double() - ref).norm() / ref.norm()).item() < 1e-5
    case = op.bench_cases(quick=True)[0]
    width = case.get("x_cols") or case["cols"]
    assert op.bench_bytes(case) == case["rows"] * width * 2 * (3 if op.gated else 4) // 2
