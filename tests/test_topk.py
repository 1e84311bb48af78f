"""hkjit.topk: exact values and indices against a NumPy reference (stable order of the negated
order-preserving key: ties to the lower index, NaN above +inf, -0 below +0) on both simulated CDNA
targets, for rows a warp holds, rows a block holds (filtered by a proven or a guessed threshold,
or searched by digit histograms) and streamed rows (histogram + candidates, and the fallback that
counts over the row when the boundary bin overflows its buffer); many ties, k = 1, k = n, ragged
n; outputs poisoned; bad input refused before anything compiles; static figures on every target;
torch.topk on a Hopper GPU (skipped without one)."""
import ctypes
from pathlib import Path

import numpy as np
import pytest

import hkjit
from hkjit import interop, jit
from hkjit.errors import DTypeError, InvalidArgumentError

from conftest import HAVE_GPU, needs_clang, needs_nvrtc, nvrtc_compile_op

ml_dtypes = pytest.importorskip("ml_dtypes")
rng = np.random.default_rng()
NP = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16, "float32": np.float32}


def order_key(x):
    """The order-preserving uint32 image of x's values (as float32: exact for bf16/fp16)."""
    xf = np.asarray(x, np.float32)
    b = xf.view(np.uint32).astype(np.int64)
    key = np.where(b & 0x80000000, ~b & 0xFFFFFFFF, b | 0x80000000)
    return np.where(np.isnan(xf), 0xFFFFFFFF, key)


def reference(x, k):
    """(values as float32, int64 indices): stable argsort of the negated key, first k."""
    idx = np.argsort(-order_key(x), axis=-1, kind="stable")[..., :k]
    return np.take_along_axis(np.asarray(x, np.float32), idx, -1), idx


def same_values(got, ref):
    """Bitwise equal as float32, NaN matching NaN."""
    got = np.asarray(got, np.float32)
    return np.array_equal(np.isnan(got), np.isnan(ref)) and np.array_equal(
        np.where(np.isnan(ref), 0, got).view(np.uint32), np.where(np.isnan(ref), 0, ref).view(np.uint32))


def inputs(shape, dtype, kind="normal"):
    if kind == "ties":              # a few integers: ties everywhere, at the boundary too
        return rng.integers(-2, 3, shape).astype(NP[dtype])
    if kind == "spread_ties":       # integers in [-150, 150): a few dozen candidates, ties among them
        return rng.integers(-150, 150, shape).astype(NP[dtype])
    if kind == "two":               # two values: the boundary bin overflows the candidate buffer
        return rng.choice(np.array([-1.5, 3.0]), shape).astype(NP[dtype])
    if kind == "scaled":            # rows of scales 1e-3 .. 1e3: a threshold from another row fails
        return (rng.standard_normal(shape) * 10.0 ** rng.integers(-3, 4, shape[:-1] + (1,))).astype(NP[dtype])
    return (rng.standard_normal(shape) * rng.uniform(0.5, 4)).astype(NP[dtype])


def run_checked(x, k, arch, launches=1, **tiles):
    lead = x.shape[:-1]
    ref_v, ref_i = reference(x, k)
    for _ in range(launches):       # split rows leave their workspace counters at zero for the next launch,
        #                             and each launch gets its survivor lists as scratch (a staging buffer)
        values = np.full(lead + (k,), np.nan, x.dtype)
        indices = np.full(lead + (k,), -1, np.int64)
        got = hkjit.topk(x, k, out_values=values, out_indices=indices, device=f"sim:{arch}", **tiles)
        assert got[0] is values and got[1] is indices
        assert np.array_equal(indices, ref_i), f"indices differ in rows {np.nonzero((indices != ref_i).any(-1))}"
        assert same_values(values, ref_v)


# (shape, k, dtype, kind, tiles): rows in registers (several rows per wave, a row per wave, a
# row per block of waves) and streamed rows (small blocks so a row spans many column blocks).
STREAM = dict(stream=1, threads=64, chunks=1)
SIM_CASES = [
    ((1, 1), 1, "float32", "normal", {}),
    ((3, 129), 5, "bfloat16", "normal", {}),
    ((5, 1000), 32, "float16", "normal", {}),
    ((2, 3, 77), 77, "bfloat16", "normal", {}),             # k = n
    ((4, 300), 1, "float32", "normal", {}),                 # k = 1
    ((6, 200), 20, "bfloat16", "ties", {}),
    ((2, 500), 128, "float32", "ties", {}),                 # k = 128
    ((9, 7), 3, "float16", "ties", {}),
    ((1, 2100), 64, "float16", "normal", dict(stream=0, row_threads=256, threads=256)),  # a block per row
    ((2, 2100), 64, "float16", "normal", {}),               # longer than a wave holds: a block per row (default),
    ((3, 1500), 128, "float32", "normal", {}),              # filtered by a proven threshold, ranked
    ((2, 2100), 40, "bfloat16", "ties", {}),                # too many candidates: the digit search
    ((2, 1800), 20, "float32", "two", dict(radix=5)),       # 5-bit digits (7 rounds), ties at the boundary
    ((9, 1200), 30, "float32", "normal", dict(rows_per_block=4)),   # rows in turn: thresholds guessed
    ((7, 1100), 1, "float16", "scaled", dict(rows_per_block=3)),    # guesses refused by the count
    ((2, 1300), 64, "bfloat16", "normal", dict(filter=0, radix=8)),  # the digit search alone
    # spread=1: the candidates ranked by lane groups of G = 1, 2, 4 or 8 (c candidates, c * G <= threads).
    # On CDNA these rows take 128-thread blocks; which G a row reaches follows from its candidate count:
    ((3, 1500), 128, "float32", "normal", dict(spread=1)),  # c > 512: the digit search (spread unused)
    ((9, 1200), 30, "float32", "normal", dict(spread=1, rows_per_block=4)),   # c ~ 34-52: G = 2
    ((5, 1100), 5, "bfloat16", "ties", dict(spread=1)),     # c ~ 200: G = 1, ties ordered by column
    ((6, 1100), 8, "float16", "normal", dict(spread=1, rows_per_block=2)),   # c ~ 20: G = 4 and 8
    ((5, 1100), 5, "bfloat16", "spread_ties", dict(spread=1)),    # c ~ 6-14, tied keys: G = 8
    ((5, 1100), 12, "float32", "spread_ties", dict(spread=1)),    # c ~ 12-35, tied keys: G = 2, 4, 8
    ((1, 1500), 50, "bfloat16", "normal", STREAM),          # streamed: histogram, then candidates
    ((1, 1200), 70, "float32", "normal", STREAM),           # (fp32: the candidates narrowed by a histogram too)
    ((1, 1500), 40, "float32", "ties", STREAM),             # streamed, ties in the candidate buffer
    ((1, 4500), 30, "bfloat16", "two", STREAM),             # streamed, boundary bin > buffer: counted over the row
    ((2, 2000), 50, "float16", "normal", dict(STREAM, split=3)),    # rows in parts
    ((2, 1100), 100, "float32", "ties", dict(STREAM, split=4)),     # a part shorter than k, one empty
]


@needs_clang
@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
@pytest.mark.parametrize("shape,k,dtype,kind,tiles", SIM_CASES)
def test_simulated(cache_dir, arch, shape, k, dtype, kind, tiles):
    run_checked(inputs(shape, dtype, kind), k, arch, launches=2 if "split" in tiles else 1, **tiles)


@needs_clang
@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_simulated_special_values(cache_dir, arch, dtype):
    """NaN (either sign) above +inf, +inf, -inf, -0 below +0, as torch.topk on CUDA."""
    x = inputs((4, 90), dtype)
    for row, k in ((0, 10), (1, 20), (2, 90), (3, 5)):
        pos = rng.choice(90, 12, replace=False)
        x[row, pos] = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, np.nan, np.inf, -0.0, 0.0, -np.inf,
                                1.0], np.float32).astype(NP[dtype])
    run_checked(x, 20, arch)
    run_checked(x[:, :33], 33, arch)
    wide = inputs((3, 700), dtype)                           # streamed in two parts
    wide[:, rng.choice(700, 40, replace=False)] = np.array([np.nan, np.inf, -np.inf, -0.0] * 10,
                                                           np.float32).astype(NP[dtype])
    run_checked(wide, 64, arch, **STREAM, split=2)


@needs_clang
@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_simulated_strided_rows_and_allocated_outputs(cache_dir, arch):
    """Rows of a wider array (misaligned base: narrower loads), outputs allocated by hkjit."""
    wide = inputs((5, 300), "bfloat16")
    x = wide[:, 3:250]
    values, indices = hkjit.topk(x, np.int64(17), device=f"sim:{arch}")    # any integer type
    ref_v, ref_i = reference(x, 17)
    assert indices.dtype == np.int64 and values.dtype == x.dtype and values.shape == (5, 17)
    assert np.array_equal(indices, ref_i) and same_values(values, ref_v)


def test_bad_input_is_refused_before_compiling(monkeypatch):
    def forbidden(*a, **k):
        raise AssertionError("bad input reached the compile stage")
    monkeypatch.setattr(jit, "load_spec", forbidden)
    monkeypatch.setattr(jit, "build_spec", forbidden)
    x = inputs((4, 300), "float16")
    for k, msg in ((0, "k=0"), (129, "k=129"), (2.0, "k=2.0"), (True, "k=True"), ("3", "k='3'")):
        with pytest.raises(InvalidArgumentError, match=msg):
            hkjit.topk(x, k, device="sim:gfx950")
    with pytest.raises(InvalidArgumentError, match="min\\(n, 128\\) = 5"):
        hkjit.topk(x[:, :5], 6, device="sim:gfx950")
    with pytest.raises(DTypeError, match="x has dtype int32"):
        hkjit.topk(x.astype(np.int32), 3, device="sim:gfx950")
    with pytest.raises(InvalidArgumentError, match="out_values has shape"):
        hkjit.topk(x, 3, out_values=np.empty((4, 4), np.float16), device="sim:gfx950")
    with pytest.raises(DTypeError, match="out_indices has dtype int32; it must be int64"):
        hkjit.topk(x, 3, out_indices=np.empty((4, 3), np.int32), device="sim:gfx950")
    with pytest.raises(DTypeError, match="out_values has dtype float32; it must be float16"):
        hkjit.topk(x, 3, out_values=np.empty((4, 3), np.float32), device="sim:gfx950")
    read_only = np.empty((4, 3), np.int64)
    read_only.flags.writeable = False
    with pytest.raises(InvalidArgumentError, match="read-only"):
        hkjit.topk(x, 3, out_indices=read_only, device="sim:gfx950")
    op = hkjit.ops.get("topk")

    def bind(xv, k=3):
        return op.bind({"x": interop.describe(xv), "values": None, "indices": None}, {"k": k}, None)
    with pytest.raises(InvalidArgumentError, match="last dimension is strided"):
        bind(x[:, ::2])
    with pytest.raises(InvalidArgumentError, match="does not collapse"):
        bind(inputs((4, 6, 8), "float16").transpose(1, 0, 2))
    assert bind(inputs((5, 4, 20), "float16")[:, :, 3:11]) is None   # rows 20 apart: accepted
    for tiles, msg in ((dict(block_m=64), "unknown keyword"), (dict(vec=8, dtype="float32"), "vec=8"),
                       (dict(stream=2), "stream=2"), (dict(split=4), "split="), (dict(blocks=4), "unknown keyword"),
                       (dict(row_threads=48), "row_threads=48"), (dict(threads=96), "threads=96"),
                       (dict(radix=3), "radix=3"), (dict(radix=12), "radix=12"), (dict(radix=8, stream=1), "radix="),
                       (dict(rows_per_block=4, radix=0), "rows_per_block="), (dict(filter=2), "filter=2"),
                       (dict(rows_per_block=65, n=2000), "rows_per_block=65"),
                       (dict(min_blocks=9, threads=256, n=2000), "min_blocks=9"),
                       (dict(prefetch=1, rows_per_block=1, n=2000), "prefetch=1"), (dict(radix=11, chunks=1), "< n=1000"),
                       (dict(spread=2, n=2000), "spread=2"), (dict(spread=1, filter=0, n=2000), "spread=1.*filter=1"),
                       (dict(chunks=1), "chunks = 512 < n=1000"),
                       (dict(n=60, threads=1024, row_threads=2), "static shared memory"), (dict(stream=1, row_threads=64), "whole block")):
        with pytest.raises(InvalidArgumentError, match=msg):
            hkjit.build("topk", target="gfx950", **{"rows": 4, "n": 1000, **tiles})


# --- static figures of the benchmark shapes ---------------------------------------------------
BENCH_SHAPES = [(1024, 256, "float32"), (4096, 1024, "bfloat16"),                         # rows a warp holds,
                (16384, 4096, "bfloat16"), (16384, 8192, "float32"),                        # rows a block holds,
                (128, 128256, "float32"), (16, 128256, "bfloat16")]                         # streamed, split


@needs_clang
@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
@pytest.mark.parametrize("rows,n,dtype", BENCH_SHAPES)
def test_amd_static(cache_dir, arch, rows, n, dtype):
    report = hkjit.inspect("topk", arch, rows=rows, n=n, dtype=dtype)
    assert report["spills"] == 0 and report["scratch_bytes"] == 0
    assert report["params"]["vec"] * np.dtype(NP[dtype]).itemsize == 16
    mix = report.get("instruction_mix")
    if mix:                                                       # (llvm-objdump present)
        assert mix["classes"].get("load_16B", 0) > 0, mix["classes"]


@needs_nvrtc
@pytest.mark.parametrize("rows,n,dtype", BENCH_SHAPES)
def test_nvrtc_static(rows, n, dtype):
    result = nvrtc_compile_op("topk", rows=rows, n=n, dtype=dtype)
    assert result.meta["spills"] == 0 and result.meta["stack_bytes"] == 0, result.log
    assert "ld.global.v4.b32" in result.ptx


def test_no_generic_lambdas_in_device_code():
    """NVRTC 12 (JIT mode) takes a lambda with `auto` parameters in device code for a host
    function and refuses the unit; NVRTC 13 accepts it, so a compile here would not catch one."""
    import re
    root = Path(hkjit.__file__).resolve().parent.parent
    for path in (root / "kernel_sources" / "topk.cuh", root / "include" / "hk" / "common" / "select.hpp"):
        text = path.read_text()
        assert not re.search(r"\]\s*\([^)]*\bauto\b", text), f"a generic lambda in {path.name}"


def test_args_layout_matches_the_documented_contract():
    from hkjit.ops.topk import Args
    offsets = [getattr(Args, f).offset for f, _ in Args._fields_]
    assert offsets == [0, 8, 16, 24, 32, 40, 48, 56, 64, 68, 72] and ctypes.sizeof(Args) == 80


# --- on the GPU --------------------------------------------------------------------------------
GPU_CASES = [((1, 1), 1, "float32"), ((3, 129), 5, "bfloat16"), ((4097, 5000), 50, "float32"),
             ((2, 65536), 128, "float16"), ((1024, 256), 10, "float32"), ((4096, 1024), 32, "bfloat16"),
             ((128, 128256), 50, "float32"), ((16, 128256), 50, "bfloat16"), ((3, 5, 1000), 1, "float16"),
             ((7, 40000), 64, "float32")]


def check_against_torch(torch, x, k, values, indices):
    """Values equal torch.topk's; indices equal where the value is unique in its row; and the
    tie rule (lower index first) exactly, through the NumPy reference of the same data."""
    ref_v, ref_i = torch.topk(x, k)
    assert torch.equal(values.float().nan_to_num(7e37), ref_v.float().nan_to_num(7e37))
    rows = x.reshape(-1, x.shape[-1]).float().sort(-1).values
    val = values.reshape(-1, k).float().contiguous()
    occurs = torch.searchsorted(rows, val, right=True) - torch.searchsorted(rows, val)
    unique = (occurs == 1) & ~val.isnan()                                  # value occurs once in its row
    got_i, torch_i = indices.reshape(-1, k), ref_i.reshape(-1, k)
    assert torch.equal(got_i[unique], torch_i[unique])
    xn = x.float().cpu().numpy()
    _, want_i = reference(xn, k)
    assert np.array_equal(indices.cpu().numpy(), want_i)


@pytest.mark.gpu
@pytest.mark.skipif(not HAVE_GPU, reason="no CUDA GPU here")
@pytest.mark.parametrize("shape,k,dtype", GPU_CASES)
@pytest.mark.parametrize("kind", ["normal", "ties"])
def test_gpu(shape, k, dtype, kind):
    import torch
    dt = getattr(torch, dtype)
    if kind == "ties":
        x = torch.randint(-3, 4, shape, device="cuda").to(dt)
    else:
        x = torch.randn(shape, device="cuda", dtype=dt) * 3
    values = torch.full(shape[:-1] + (k,), float("nan"), device="cuda", dtype=dt)
    indices = torch.full(shape[:-1] + (k,), -1, device="cuda", dtype=torch.int64)
    hkjit.topk(x, k, out_values=values, out_indices=indices)
    check_against_torch(torch, x, k, values, indices)
    again_v, again_i = hkjit.topk(x, k)          # allocating, through the repeat path
    assert torch.equal(again_i, indices) and torch.equal(again_v.float().nan_to_num(0), values.float().nan_to_num(0))


@pytest.mark.gpu
@pytest.mark.skipif(not HAVE_GPU, reason="no CUDA GPU here")
def test_gpu_special_values_strided_rows_and_numpy():
    import torch
    wide = torch.randn(64, 3000, device="cuda")
    x = wide[:, 5:2053]
    x[:, 7] = float("nan")
    x[:, 9] = float("inf")
    x[:3, 100:200] = float("-inf")
    x[:, 11] = -0.0
    values, indices = hkjit.topk(x, 20)
    check_against_torch(torch, x, 20, values, indices)
    xn = inputs((33, 1000), "float32", "ties")
    v, i = hkjit.topk(xn, 40, device="cuda:0")
    ref_v, ref_i = reference(xn, 40)
    assert np.array_equal(i, ref_i) and same_values(v, ref_v)


@needs_clang
def test_bench_peers_compute_the_op(cache_dir):
    """`hkjit bench`'s peer (torch.topk, also what torch.compile is given) is the op: it returns the
    same (values, indices) tuple as hkjit on the simulator, and the byte count is the op's traffic."""
    torch = pytest.importorskip("torch")
    op = hkjit.ops.get("topk")
    x = torch.randn(5, 300) * 3
    got = hkjit.topk(x, 12, device="sim:gfx950")
    ref = op.bench_peers(torch)["torch eager"](x, 12)
    assert isinstance(ref, tuple) and len(ref) == 2
    assert torch.equal(got[0], ref[0]) and torch.equal(got[1], ref[1])
    for case in op.bench_cases(quick=False):
        assert op.bench_bytes(case) == case["rows"] * (case["n"] * 4 + case["k"] * (4 + 8))   # float32 cases


@pytest.mark.gpu
@pytest.mark.skipif(not HAVE_GPU, reason="no CUDA GPU here")
@pytest.mark.parametrize("tiles", [dict(stream=0, row_threads=256, threads=256),   # a block-wide row in registers
                                   dict(stream=1, threads=128, chunks=1, split=3),  # small streamed parts
                                   dict(vec=2),                                     # narrower loads
                                   dict(radix=8, threads=512, chunks=2),            # digit search, 8-bit digits
                                   dict(rows_per_block=4, min_blocks=3),            # rows in turn, loads ahead
                                   dict(rows_per_block=8, filter=0),                # rows in turn, digits only
                                   dict(spread=1), dict(spread=1, rows_per_block=8),   # lane groups rank
                                   dict(stream=1)])                                 # streamed (the old default)
def test_gpu_schedule_overrides(tiles):
    import torch
    for kind in ("normal", "ties", "scaled"):
        if kind == "ties":
            x = torch.randint(-3, 4, (33, 3000), device="cuda").float()
        elif kind == "scaled":      # rows of scales 1e-3 .. 1e3: a threshold guessed from another row fails
            x = torch.randn(33, 3000, device="cuda") * 10.0 ** torch.randint(-3, 4, (33, 1), device="cuda")
        else:
            x = torch.randn(33, 3000, device="cuda")
        values, indices = hkjit.topk(x, 40, **tiles)
        check_against_torch(torch, x, 40, values, indices)


@pytest.mark.gpu
@pytest.mark.skipif(not HAVE_GPU, reason="no CUDA GPU here")
@pytest.mark.parametrize("n,dtype", [(4096, "float32"), (8192, "float32"), (4096, "bfloat16"), (2048, "float16")])
@pytest.mark.parametrize("tiles", [dict(rows_per_block=8), dict(rows_per_block=4, filter=0), dict(rows_per_block=3),
                                   dict(rows_per_block=8, spread=1)])
def test_gpu_radix_rows_in_turn(n, dtype, tiles):
    """Rows a block holds, several a block in turn (the next one prefetched), thresholds guessed
    from earlier rows (and refused by the count where the rows' scales differ; filter=0: the digit
    search alone), against torch on 37 rows (a last block short of rows_per_block)."""
    import torch
    dt = getattr(torch, dtype)
    for kind in ("normal", "ties", "scaled"):
        if kind == "ties":
            x = torch.randint(-3, 4, (37, n), device="cuda").to(dt)
        elif kind == "scaled":
            x = (torch.randn(37, n, device="cuda") * 10.0 ** torch.randint(-3, 4, (37, 1), device="cuda")).to(dt)
        else:
            x = torch.randn(37, n, device="cuda", dtype=dt)
        for k in (1, 32, 128):
            values = torch.full((37, k), float("nan"), device="cuda", dtype=dt)
            indices = torch.full((37, k), -1, device="cuda", dtype=torch.int64)
            hkjit.topk(x, k, out_values=values, out_indices=indices, **tiles)
            check_against_torch(torch, x, k, values, indices)
