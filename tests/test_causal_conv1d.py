"""hkjit.causal_conv1d / causal_conv1d_update (kernel_sources/causal_conv1d.cuh): simulator
correctness on gfx942 and gfx950 against float64 NumPy written from the definition (ragged batch,
channels and lengths, widths 2..4, bias or none, silu or none, every dtype, fp32 weights with 16-bit
x, both memory layouts, segments, halos that span lanes, the state shifted in place), outputs
poisoned; bad input refused before compiling; static figures on every target; a GPU run against
torch (F.conv1d with groups=D; skipped without a GPU)."""
import ctypes

import numpy as np
import pytest

import hkjit
from hkjit import jit, runtime
from hkjit.errors import DTypeError, InvalidArgumentError
from hkjit.ops import causal_conv1d as conv_mod

from conftest import HAVE_GPU, needs_clang, needs_nvrtc, nvrtc_compile_op

ml_dtypes = pytest.importorskip("ml_dtypes")
rng = np.random.default_rng()
NP = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16, "float32": np.float32}
TOL = {"bfloat16": 1e-2, "float16": 2e-3, "float32": 1e-5}
F64 = np.float64


def silu(y):
    return y / (1 + np.exp(-y))


def conv_ref(x, w, b, act):
    """out[b, d, t] = act(bias[d] + sum_k w[d, k] x[b, d, t - (W - 1) + k]), zeros before t = 0."""
    x, w = np.asarray(x, F64), np.asarray(w, F64)
    length, width = x.shape[2], w.shape[1]
    xp = np.concatenate([np.zeros(x.shape[:2] + (width - 1,)), x], -1)
    y = sum(w[None, :, k, None] * xp[:, :, k:k + length] for k in range(width))
    if b is not None:
        y = y + np.asarray(b, F64)[None, :, None]
    return silu(y) if act else y


def update_ref(x, state, w, b, act):
    """(out, new state): the window is the state's last W - 1 steps and x; the state shifts by one."""
    x2 = np.asarray(x, F64).reshape(state.shape[:2])
    window = np.concatenate([np.asarray(state, F64)[..., state.shape[2] - (w.shape[1] - 1):], x2[..., None]], -1)
    y = (window * np.asarray(w, F64)[None]).sum(-1)
    if b is not None:
        y = y + np.asarray(b, F64)[None]
    new_state = np.concatenate([np.asarray(state)[..., 1:], np.asarray(x).reshape(x2.shape)[..., None]], -1)
    return (silu(y) if act else y).reshape(np.shape(x)), new_state


def rel_err(got, ref):
    got = np.asarray(got, F64)
    assert np.isfinite(got).all(), "an element was never written"
    return np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-30)


def rand(shape, dtype, scale=1.0):
    return (rng.standard_normal(shape) * scale * rng.uniform(0.5, 2)).astype(NP[dtype])


def weights(dim, width, dtype, bias):
    return rand((dim, width), dtype, 1 / width), rand((dim,), dtype) if bias else None


# (batch, dim, len, width, dtype, weight dtype, bias, activation): ragged everything, lengths
# below, at and across a step, one element, fp32 weights with 16-bit x.
SIM_CASES = [(1, 1, 1, 2, "float32", "float32", False, None), (2, 5, 37, 4, "float32", "float32", True, "silu"),
             (1, 3, 130, 3, "bfloat16", "bfloat16", True, None), (2, 67, 9, 4, "float16", "float16", False, "swish"),
             (1, 7, 129, 4, "bfloat16", "float32", True, "silu"), (2, 2, 64, 2, "float16", "float32", True, None)]


@needs_clang
@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
@pytest.mark.parametrize("case", SIM_CASES)
def test_simulated(cache_dir, arch, case):
    batch, dim, length, width, dtype, wdt, bias, act = case
    x = rand((batch, dim, length), dtype)
    w, b = weights(dim, width, wdt, bias)
    out = np.full(x.shape, np.nan, NP[dtype])
    got = hkjit.causal_conv1d(x, w, b, activation=act, out=out, device=f"sim:{arch}")
    assert got is out
    assert rel_err(out, conv_ref(x, w, b, act)) < TOL[dtype]


# Schedules the defaults do not reach at these sizes: scalar and 2-element chunks (a halo spread
# over up to three lanes, the first lanes taking it from the step before), several segments per
# row, one lane group of 4, 8 chunks.
SCHEDULES = [dict(vec=1, row_threads=4, chunks=2, seg_len=16, stages=2),
             dict(vec=2, row_threads=8, chunks=3, seg_len=48, stages=2),
             dict(row_threads=4, chunks=8, seg_len=256, threads=64, stages=1),
             dict(vec=4, row_threads=16, chunks=1, seg_len=64, stages=1)]


@needs_clang
@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
@pytest.mark.parametrize("tiles", SCHEDULES)
def test_simulated_schedules(cache_dir, arch, tiles):
    width = 4 if tiles.get("vec", 8) < 4 else 3
    x = rand((2, 3, 120), "bfloat16")                            # rows of 240 bytes: 16-byte accesses
    w, b = weights(3, width, "float32", True)
    got = hkjit.causal_conv1d(x, w, b, activation="silu", device=f"sim:{arch}", **tiles)
    assert rel_err(got, conv_ref(x, w, b, True)) < TOL["bfloat16"]


def run_strided(arch, layout, batch, dim, length, width, dtype, tiles=None):
    """The kernel on device copies of padded arrays, read through strided views: L-major rows
    apart by more than L (and batches by more than D rows), or channel-last (B, L, D) memory whose
    time steps lie more than D channels apart. (Host arrays reach kernels as dense copies, so
    strides and the channel-last layout are exercised here directly.)"""
    dev = runtime.get("sim", arch)
    op = hkjit.ops.get("causal_conv1d")
    vec = 16 // np.dtype(NP[dtype]).itemsize
    if layout == "bdl":
        pad = (batch, dim + 1, length + vec)          # channel stride length + vec, batch stride (dim+1) * that
        view = (slice(None), slice(0, dim), slice(0, length))
    else:
        pad = (batch, length + 1, dim + vec)          # time stride dim + vec
        view = (slice(None), slice(0, length), slice(0, dim))
    mem = rand(pad, dtype)
    xl = mem[view] if layout == "bdl" else mem[view].transpose(0, 2, 1)
    w, b = weights(dim, width, dtype, True)
    out_mem = np.full(pad, np.nan, NP[dtype])
    itemsize = mem.itemsize
    xs = tuple(s // itemsize for s in (mem[view] if layout == "bdl" else mem[view].transpose(0, 2, 1)).strides)
    plan = op.plan(arch, batch=batch, dim=dim, len=length, width=width, dtype=dtype, activation="silu",
                   layout=layout, **(tiles or {}))
    kernel = jit.load_spec(plan.spec, dev)
    host = [mem, out_mem, w, b]
    bufs = [dev.alloc(a.nbytes) for a in host]
    try:
        for p, a in zip(bufs, host):
            dev.copy_in(p, a.ctypes.data, a.nbytes)
        args = plan.fill(x=bufs[0], y=bufs[1], weight=bufs[2], bias=bufs[3], xs=xs, ys=xs, ws=(width, 1), bs=1,
                         shape=(batch, dim, length))
        kernel.launch(plan.grid, (plan.threads, 1, 1), 0, args, 0)
        dev.synchronize(0)
        dev.copy_out(out_mem.ctypes.data, bufs[1], out_mem.nbytes)
    finally:
        for p in bufs:
            dev.free(p)
    got = out_mem[view] if layout == "bdl" else out_mem[view].transpose(0, 2, 1)
    assert rel_err(got, conv_ref(xl, w, b, True)) < TOL[dtype]
    untouched = np.ones(pad, bool)
    untouched[view] = False
    assert np.isnan(out_mem[untouched].astype(np.float32)).all(), "written outside the output"


@needs_clang
@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
@pytest.mark.parametrize("layout,shape,tiles", [
    ("bdl", (2, 3, 77, 4, "bfloat16"), None),
    ("bld", (2, 67, 41, 4, "bfloat16"), None),                            # channels past a group's
    ("bld", (1, 5, 30, 3, "float32"), dict(chunks=2, seg_len=16)),       # several segments, 2 steps a load
    ("bld", (2, 130, 9, 2, "float16"), dict(row_threads=8, chunks=1, seg_len=2, stages=1)),
    ("bld", (1, 40, 50, 4, "bfloat16"), dict(vec=8, chunks=3, seg_len=9, stages=1)),
    # direct=1: whole steps through the walked pointer, edge channels and steps through the tile path
    ("bld", (2, 67, 41, 4, "bfloat16"), dict(direct=1)),
    ("bld", (1, 5, 30, 3, "float32"), dict(chunks=2, seg_len=16, direct=1)),
    ("bld", (2, 130, 33, 3, "float16"), dict(vec=4, row_threads=8, chunks=2, seg_len=8, direct=1)),
    ("bld", (1, 40, 50, 4, "bfloat16"), dict(vec=8, chunks=3, seg_len=9, stages=1, direct=1)),
])
def test_simulated_strided_and_channel_last(cache_dir, arch, layout, shape, tiles):
    run_strided(arch, layout, *shape, tiles=tiles)


# (batch, dim, state_len, width, dtype, weight dtype, bias, activation, x 3-D)
UPDATE_CASES = [(1, 1, 1, 2, "float32", "float32", False, None, False),
                (2, 67, 3, 4, "bfloat16", "bfloat16", True, "silu", False),
                (2, 9, 6, 3, "float16", "float32", True, None, True),
                (1, 130, 4, 4, "float32", "float32", False, "silu", True)]


@needs_clang
@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
@pytest.mark.parametrize("case", UPDATE_CASES)
def test_simulated_update(cache_dir, arch, case):
    batch, dim, state_len, width, dtype, wdt, bias, act, three_d = case
    x = rand((batch, dim, 1) if three_d else (batch, dim), dtype)
    state = rand((batch, dim, state_len), dtype)
    before = state.copy()
    w, b = weights(dim, width, wdt, bias)
    out = np.full(x.shape, np.nan, NP[dtype])
    got = hkjit.causal_conv1d_update(x, state, w, b, activation=act, out=out, device=f"sim:{arch}")
    ref_out, ref_state = update_ref(x, before, w, b, act)
    assert got is out and got.shape == x.shape
    assert rel_err(out, ref_out) < TOL[dtype]
    assert np.array_equal(state.view(np.uint8), ref_state.astype(NP[dtype]).view(np.uint8)), "state not shifted"


@needs_clang
def test_simulated_update_steps_match_the_whole_sequence(cache_dir):
    """Decoding one step at a time from a zero state gives the prefill's outputs (a strided view of
    the state, as a cache slot would be)."""
    x = rand((2, 5, 6), "float32")
    w, b = weights(5, 4, "float32", True)
    cache = np.zeros((2, 5, 4), np.float32)
    state = cache[:, :, 1:]                                       # a strided view: written back after each step
    steps = [hkjit.causal_conv1d_update(x[:, :, t], state, w, b, activation="silu", device="sim:gfx950")
             for t in range(6)]
    assert not cache[:, :, 0].any() and np.array_equal(state, x[:, :, 3:])
    assert rel_err(np.stack(steps, -1), conv_ref(x, w, b, True)) < 1e-5


def test_bad_input_is_refused_before_compiling(cache_dir):
    x = rand((2, 3, 8), "float32")
    w, b = weights(3, 4, "float32", True)
    conv_cases = [
        (dict(weight=rand((3, 5), "float32")), InvalidArgumentError, "width 5"),
        (dict(weight=rand((3, 1), "float32")), InvalidArgumentError, "width 1"),
        (dict(weight=rand((3, 1, 4), "float32")), InvalidArgumentError, r"weight\[:, 0\]"),
        (dict(weight=rand((4, 4), "float32")), InvalidArgumentError, "3 channels"),
        (dict(bias=rand((4,), "float32")), InvalidArgumentError, "bias must be"),
        (dict(weight=rand((3, 4), "float16")), DTypeError, "x.dtype"),
        (dict(bias=rand((3,), "float16")), DTypeError, "weight's"),
        (dict(x=x.astype(np.int32)), DTypeError, "dtype"),
        (dict(x=x[0]), InvalidArgumentError, "3-D"),
        (dict(activation="gelu"), InvalidArgumentError, "activation"),
        (dict(out=np.empty((2, 3, 7), np.float32)), InvalidArgumentError, "out"),
    ]
    for change, error, words in conv_cases:
        kw = dict(x=x, weight=w, bias=b) | change
        xx, ww, bb = kw.pop("x"), kw.pop("weight"), kw.pop("bias")
        with pytest.raises(error, match=words):
            hkjit.causal_conv1d(xx, ww, bb, device="sim:gfx950", **kw)
    xs, state = rand((2, 3), "float32"), rand((2, 3, 3), "float32")
    read_only = state.copy()
    read_only.flags.writeable = False
    update_cases = [
        (dict(conv_state=rand((2, 3, 2), "float32")), InvalidArgumentError, "at least 3"),
        (dict(conv_state=rand((2, 4, 3), "float32")), InvalidArgumentError, "conv_state must be"),
        (dict(conv_state=rand((2, 3, 3), "float16")), DTypeError, "conv_state has dtype"),
        (dict(conv_state=read_only), InvalidArgumentError, "conv_state is read-only"),
        (dict(x=rand((2, 3, 2), "float32")), InvalidArgumentError, "one step"),
        (dict(weight=rand((3, 5), "float32")), InvalidArgumentError, "width 5"),
        (dict(activation="relu"), InvalidArgumentError, "activation"),
    ]
    for change, error, words in update_cases:
        kw = dict(x=xs, conv_state=state, weight=w, bias=b) | change
        args = [kw.pop(k) for k in ("x", "conv_state", "weight", "bias")]
        with pytest.raises(error, match=words):
            hkjit.causal_conv1d_update(*args, device="sim:gfx950", **kw)
    with pytest.raises(InvalidArgumentError, match="row_threads"):
        hkjit.build("causal_conv1d", target="gfx950", batch=1, dim=8, len=64, row_threads=2)
    with pytest.raises(InvalidArgumentError, match="seg_len"):
        hkjit.build("causal_conv1d", target="gfx950", batch=1, dim=8, len=64, seg_len=100)
    with pytest.raises(InvalidArgumentError, match="direct=1"):     # the walked pointer: channel-last only
        hkjit.build("causal_conv1d", target="gfx950", batch=1, dim=8, len=64, direct=1)
    with pytest.raises(InvalidArgumentError, match="direct=2"):
        hkjit.build("causal_conv1d", target="gfx950", batch=1, dim=8, len=64, layout="bld", direct=2)
    with pytest.raises(InvalidArgumentError, match="state_len"):
        hkjit.build("causal_conv1d_update", target="gfx950", batch=1, dim=8, state_len=2, width=4)
    assert "read-only" in str(pytest.raises(InvalidArgumentError, hkjit.causal_conv1d_update, xs, read_only, w,
                                            device="sim:gfx950").value)
    assert "leave it out" not in str(pytest.raises(InvalidArgumentError, hkjit.causal_conv1d_update, xs, read_only,
                                                   w, device="sim:gfx950").value)
    assert not list(cache_dir.rglob("*.co")) and not list(cache_dir.rglob("*.hsaco"))


def test_args_layout_matches_the_documented_contract():
    offsets = [getattr(conv_mod.Args, f).offset for f, _ in conv_mod.Args._fields_]
    assert offsets == [0, 8, 16, 24] + list(range(32, 104, 8)) + [104, 108, 112, 116, 120]
    assert ctypes.sizeof(conv_mod.Args) == 128
    offsets = [getattr(conv_mod.UpdateArgs, f).offset for f, _ in conv_mod.UpdateArgs._fields_]
    assert offsets == list(range(0, 40, 8)) + list(range(40, 120, 8)) + [120, 124, 128]
    assert ctypes.sizeof(conv_mod.UpdateArgs) == 136


def test_schedule_per_shape():
    """Long rows: a warp per row, 4 loads in flight; many short rows: fewer lanes a row; few rows:
    segments; channel-last: one group across the channels, segments to fill the device."""
    op = hkjit.ops.get("causal_conv1d")

    def cfg(**kw):
        return op.plan("sm_90a", **kw).config
    long_rows = cfg(batch=8, dim=4096, len=2048)
    assert (long_rows["vec"], long_rows["row_threads"], long_rows["chunks"], long_rows["segs"]) == (8, 32, 2, 1)
    assert long_rows["stages"] == 1 and long_rows["threads"] == 128
    assert op.plan("gfx950", batch=8, dim=4096, len=2048).config["chunks"] == 4
    short = cfg(batch=1, dim=2048, len=128)
    assert short["row_threads"] * short["chunks"] * 8 == 128 and short["segs"] == 1
    few = cfg(batch=1, dim=16, len=1 << 20)
    assert few["segs"] > 1 and few["seg_len"] % (few["row_threads"] * few["vec"] * few["chunks"]) == 0
    last = cfg(batch=8, dim=4096, len=2048, layout="bld")
    assert last["vec"] == 2 and last["stages"] == 2 and last["row_threads"] * last["vec"] <= 4096 and last["segs"] > 1
    assert last["seg_len"] >= 16 * last["chunks"] and last["min_blocks"] * last["threads"] <= 2048


STATIC = [dict(batch=8, dim=4096, len=2048, activation="silu"),
          dict(batch=8, dim=4096, len=2048, activation="silu", layout="bld"),
          dict(batch=8, dim=4096, len=2048, activation="silu", layout="bld", direct=1),
          dict(batch=1, dim=64, len=4097, width=2, dtype="float32", align=4),
          dict(batch=4, dim=256, len=100, width=3, dtype="float16", weight_dtype="float32")]


@needs_clang
@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
@pytest.mark.parametrize("params", STATIC)
def test_amd_static(cache_dir, arch, params):
    report = hkjit.inspect("causal_conv1d", arch, **params)
    assert report["spills"] == 0 and report["scratch_bytes"] == 0
    assert report["kernarg_bytes"] >= ctypes.sizeof(conv_mod.Args)
    mix = report.get("instruction_mix")
    if mix and params.get("align", 16) == 16 and params.get("layout") != "bld":   # channel-last: 4-byte chunks
        assert mix["classes"].get("load_16B", 0) > 0, mix["classes"]


@needs_clang
@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_amd_static_update(cache_dir, arch):
    report = hkjit.inspect("causal_conv1d_update", arch, batch=64, dim=4096, state_len=3, activation="silu")
    assert report["spills"] == 0 and report["scratch_bytes"] == 0
    assert report["kernarg_bytes"] >= ctypes.sizeof(conv_mod.UpdateArgs)


@needs_nvrtc
@pytest.mark.parametrize("params", STATIC)
def test_nvrtc_static(params):
    result = nvrtc_compile_op("causal_conv1d", **params)
    assert result.meta["spills"] == 0 and result.meta["stack_bytes"] == 0, result.log
    if params.get("align", 16) == 16 and params.get("layout") != "bld":
        assert "ld.global.v4" in result.ptx and "st.global.v4" in result.ptx     # 16-byte accesses


@needs_nvrtc
def test_nvrtc_static_update():
    result = nvrtc_compile_op("causal_conv1d_update", batch=64, dim=4096, state_len=3, activation="silu")
    assert result.meta["spills"] == 0 and result.meta["stack_bytes"] == 0, result.log


# --- on the GPU --------------------------------------------------------------------------------
def _torch_conv(torch, x, w, b, act):
    """causal-conv1d's reference, in float64: F.conv1d with groups=D, padded on the left."""
    F = torch.nn.functional
    width = w.shape[1]
    y = F.conv1d(F.pad(x.double(), (width - 1, 0)), w.double().unsqueeze(1), None if b is None else b.double(),
                 groups=w.shape[0])
    return F.silu(y) if act else y


GPU_SHAPES = [(1, 1, 1), (3, 129, 5000), (2, 4096, 4097), (4, 1024, 256), (1, 64, 70001)]


@pytest.mark.gpu
@pytest.mark.skipif(not HAVE_GPU, reason="no CUDA GPU here")
@pytest.mark.parametrize("shape", GPU_SHAPES)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_gpu(shape, dtype):
    import torch
    dt = getattr(torch, dtype)
    batch, dim, length = shape
    for width in (2, 3, 4):
        act = "silu" if width != 3 else None
        w = torch.randn(dim, width, device="cuda", dtype=dt) / width
        b = torch.randn(dim, device="cuda", dtype=dt) if width != 2 else None
        for layout in ("bdl", "bld"):
            x = torch.randn(batch, dim, length, device="cuda", dtype=dt) if layout == "bdl" else \
                torch.randn(batch, length, dim, device="cuda", dtype=dt).transpose(1, 2)
            out = torch.full_like(x, float("nan"))
            got = hkjit.causal_conv1d(x, w, b, activation=act, out=out)
            ref = _torch_conv(torch, x, w, b, act)
            assert got is out and torch.isfinite(out).all()
            err = ((out.double() - ref).norm() / ref.norm()).item()
            assert err < TOL[dtype], (shape, dtype, width, layout, err)
            new = hkjit.causal_conv1d(x, w, b, activation=act)         # a new out, laid out like x
            assert new.stride() == x.stride() or min(dim, length) == 1 or layout == "bdl"
            assert torch.equal(new, out)
            if layout == "bld" and dim > 1:   # read channel-last: the walked pointer (NVIDIA's default)
                # and the tile path give the same bits
                assert torch.equal(hkjit.causal_conv1d(x, w, b, activation=act, direct=0), out)
    # Mamba's call: a channel slice of a (B, L, 3 D) projection, fp32 weights
    if min(shape) > 1:
        big = torch.randn(batch, length, 3 * dim, device="cuda", dtype=dt)
        x = big[:, :, dim:2 * dim].transpose(1, 2)
        w32, b32 = torch.randn(dim, 4, device="cuda") / 4, torch.randn(dim, device="cuda")
        got = hkjit.causal_conv1d(x, w32, b32, activation="silu")
        ref = _torch_conv(torch, x, w32, b32, True)
        assert ((got.double() - ref).norm() / ref.norm()).item() < TOL[dtype]
        assert torch.equal(hkjit.causal_conv1d(x, w32, b32, activation="silu", direct=0), got)


@pytest.mark.gpu
@pytest.mark.skipif(not HAVE_GPU, reason="no CUDA GPU here")
@pytest.mark.parametrize("batch,dim", [(1, 1), (3, 129), (64, 4096), (256, 8192)])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_gpu_update(batch, dim, dtype):
    import torch
    dt = getattr(torch, dtype)
    for width, state_len, act in ((4, 3, "silu"), (2, 1, None), (3, 5, "silu")):
        w = torch.randn(dim, width, device="cuda", dtype=dt) / width
        b = torch.randn(dim, device="cuda", dtype=dt)
        x = torch.randn(batch, dim, device="cuda", dtype=dt)
        for channel_last in (False, True):
            state = torch.randn(batch, state_len, dim, device="cuda", dtype=dt).transpose(1, 2) if channel_last \
                else torch.randn(batch, dim, state_len, device="cuda", dtype=dt)
            before = state.clone()
            out = torch.full_like(x, float("nan"))
            got = hkjit.causal_conv1d_update(x, state, w, b, activation=act, out=out)
            window = torch.cat([before[..., state_len - (width - 1):], x.unsqueeze(-1)], -1).double()
            ref = (window * w.double()).sum(-1) + b.double()
            ref = torch.nn.functional.silu(ref) if act else ref
            assert got is out and torch.isfinite(out).all()
            assert ((out.double() - ref).norm() / ref.norm()).item() < TOL[dtype]
            assert torch.equal(state, torch.cat([before[..., 1:], x.unsqueeze(-1)], -1))
    # a run of steps equals the prefill on the whole sequence
    x = torch.randn(batch, dim, 9, device="cuda", dtype=dt)
    w = torch.randn(dim, 4, device="cuda", dtype=dt) / 4
    state = torch.zeros(batch, dim, 3, device="cuda", dtype=dt)
    steps = torch.stack([hkjit.causal_conv1d_update(x[:, :, t], state, w, activation="silu") for t in range(9)], -1)
    whole = hkjit.causal_conv1d(x, w, activation="silu")
    assert ((steps.double() - whole.double()).norm() / whole.double().norm()).item() < TOL[dtype]
