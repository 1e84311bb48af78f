"""Row-wise tile operations, one source for three targets: tests/kernels/tile_rowops.cuh uses only
the shared tile interface (row/column reductions and broadcasts, exp2/log2/rsqrt, conversions, on
rt_acc tiles and on rt_row tiles of every row-group width) and must compile for gfx942, gfx950 and
sm_90a, and compute the same thing on both simulated CDNA targets (and on a Hopper GPU where one
is present), checked against a float64 NumPy reference."""
import ctypes
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from hkjit import cache, codeobj, jit, runtime, spec as spec_mod, targets

from conftest import HAVE_GPU, needs_clang, needs_nvrtc

KERNELS = Path(__file__).parent / "kernels"
CPP = {"float32": "float", "bfloat16": "hk::bf16", "float16": "hk::half"}
NP = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16, "float16": np.float16}
TOL = {"float32": 2e-5, "bfloat16": 1.6e-2, "float16": 2e-3}
GROUPS = 2   # 64 x 32 rt_acc tiles per block

# rt_row layouts: name -> (dtype, rows per group R, chunks per thread K, V, threads per row G, block)
# covering a sub-warp group, a group of one AMD wave (two NVIDIA warps: shared-memory reduction
# there), groups of several waves (shared memory on both), and scalar chunks (V = 1).
ROW_LAYOUTS = {
    "subwarp": ("float32", 2, 2, 4, 16, 64),
    "wave": ("bfloat16", 1, 2, 8, 64, 128),
    "multiwave": ("float16", 2, 1, 8, 128, 256),
    "scalar": ("bfloat16", 3, 8, 1, 32, 64),
}


class Args(ctypes.Structure):
    _fields_ = [("x", ctypes.c_void_p), ("y_row", ctypes.c_void_p), ("y_col", ctypes.c_void_p),
                ("y_mix", ctypes.c_void_p), ("rows", ctypes.c_int), ("cols", ctypes.c_int), ("ld", ctypes.c_int)]


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    """The test kernels' folder as hkjit's kernel sources, and a private cache shared by this module."""
    mp = pytest.MonkeyPatch()
    mp.setattr(spec_mod, "kernel_sources_dir", lambda: KERNELS)
    mp.setenv("HKJIT_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    cache.reset_default_cache()
    yield
    mp.undo()
    cache.reset_default_cache()


def acc_spec(target, dtype):
    return spec_mod.Specialization("tile_rowops", targets.parse(target), "tile_rowops.cuh",
                                   f"tile_rowops_acc<{CPP[dtype]}, {GROUPS}>", "hkjit_tile_rowops_acc",
                                   spec_mod.make_params({"dtype": dtype, "tile": "acc"}))


def row_spec(target, layout):
    dtype, R, K, V, G, threads = ROW_LAYOUTS[layout]
    C = K * G * V
    return spec_mod.Specialization("tile_rowops", targets.parse(target), "tile_rowops.cuh",
                                   f"tile_rowops_row<{CPP[dtype]}, {R}, {C}, {V}, {G}, {threads}>",
                                   "hkjit_tile_rowops_row", spec_mod.make_params({"dtype": dtype, "layout": layout}))


TARGETS = [pytest.param("gfx942", marks=needs_clang), pytest.param("gfx950", marks=needs_clang),
           pytest.param("sm_90a", marks=needs_nvrtc)]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("kind", ["acc:float32", "acc:bfloat16"] + [f"row:{n}" for n in ROW_LAYOUTS])
def test_one_source_compiles_for_every_target(kernels, target, kind):
    what, name = kind.split(":")
    spec = acc_spec(target, name) if what == "acc" else row_spec(target, name)
    built = jit.build_spec(spec)
    assert spec.entry in codeobj.symbols(built.code)
    assert built.meta["spills"] == 0


def reference(x, block_rows, block_cols):
    """y_row, y_col, y_mix of tile_rowops.cuh in float64, with reductions over blocks of
    block_rows x block_cols (cells outside x are -inf, as the kernels load them)."""
    rows, cols = x.shape
    pr, pc = -(-rows // block_rows) * block_rows, -(-cols // block_cols) * block_cols
    xp = np.full((pr, pc), -np.inf)
    xp[:rows, :cols] = x
    b = xp.reshape(pr // block_rows, block_rows, pc // block_cols, block_cols)
    with np.errstate(invalid="ignore", divide="ignore"):
        rm = b.max(axis=3, keepdims=True)
        a = np.exp2(b - rm)
        rs = a.sum(axis=3, keepdims=True)
        y_row = a / rs
        cm = b.max(axis=1, keepdims=True)
        e = np.exp2(b - cm)
        cs = e.sum(axis=1, keepdims=True)
        y_col = np.log2(e / np.sqrt(cs)) + cm
        y_mix = np.maximum(b * rs / cs + rm - b / 2, -b / 2) + b / 2
    return [y.reshape(pr, pc)[:rows, :cols] for y in (y_row, y_col, y_mix)]


def _run(device, spec, dtype, rows, cols, ld, grid, block, block_rows, block_cols):
    rng = np.random.default_rng()
    x = np.zeros((rows, ld), NP[dtype])
    x[:, :cols] = (rng.standard_normal((rows, cols)) * 3).astype(NP[dtype])
    outs = [np.full((rows, ld), np.nan, NP[dtype]) for _ in range(3)]
    kernel = jit.load_spec(spec, device)
    bufs = [device.alloc(a.nbytes) for a in [x] + outs]
    try:
        for p, a in zip(bufs, [x] + outs):
            device.copy_in(p, a.ctypes.data, a.nbytes)
        kernel.launch(grid, block, 0, Args(*bufs, rows, cols, ld), 0)
        device.synchronize(0)
        for p, a in zip(bufs[1:], outs):
            device.copy_out(a.ctypes.data, p, a.nbytes)
    finally:
        for p in bufs:
            device.free(p)
    refs = reference(x[:, :cols].astype(np.float64), block_rows, block_cols)
    for name, out, ref in zip(("y_row", "y_col", "y_mix"), outs, refs):
        y = out[:, :cols].astype(np.float64)
        assert np.isfinite(y).all(), f"{name}: an element was never written"
        err = np.max(np.abs(y - ref) / (np.abs(ref) + 1))
        assert err < TOL[dtype], f"{name}: error {err:.2e} (tolerance {TOL[dtype]:.0e})"
        assert np.isnan(out[:, cols:].astype(np.float32)).all(), f"{name}: written past the last column"


def run_acc(device, spec, dtype, rows, cols):
    tiles = -(-rows // 64) * -(-cols // 32)
    group = 128 if device.target.is_nvidia else 64
    _run(device, spec, dtype, rows, cols, cols, (-(-tiles // GROUPS), 1, 1), (GROUPS * group, 1, 1), 64, 32)


def run_row(device, spec, layout, rows, cols):
    dtype, R, K, V, G, threads = ROW_LAYOUTS[layout]
    assert cols <= K * G * V
    ld = cols if V == 1 else -(-cols // V) * V + V   # padded rows keep 16-byte chunks aligned
    per_block = threads // G * R
    _run(device, spec, dtype, rows, cols, ld, (-(-rows // per_block), 1, 1), (threads, 1, 1), R, cols)


SIM = [pytest.param("gfx942", marks=needs_clang), pytest.param("gfx950", marks=needs_clang)]


@pytest.mark.parametrize("arch", SIM)
@pytest.mark.parametrize("dtype,rows,cols", [("float32", 64, 64), ("float32", 130, 77), ("bfloat16", 5, 200)])
def test_acc_tiles_on_both_simulated_targets(kernels, arch, dtype, rows, cols):
    run_acc(runtime.get("sim", arch), acc_spec(arch, dtype), dtype, rows, cols)


ROW_SHAPES = {"subwarp": [(7, 128), (3, 61)], "wave": [(3, 1024), (2, 999)], "multiwave": [(5, 1000), (4, 9)],
              "scalar": [(7, 255), (4, 1)]}


@pytest.mark.parametrize("arch", SIM)
@pytest.mark.parametrize("layout,rows,cols", [(k, r, c) for k, shapes in ROW_SHAPES.items() for r, c in shapes])
def test_row_tiles_on_both_simulated_targets(kernels, arch, layout, rows, cols):
    run_row(runtime.get("sim", arch), row_spec(arch, layout), layout, rows, cols)


@pytest.mark.gpu
@pytest.mark.skipif(not HAVE_GPU, reason="no CUDA GPU here")
def test_same_source_runs_on_hopper(kernels):
    device = runtime.get("cuda", 0)
    for dtype, rows, cols in [("float32", 130, 77), ("bfloat16", 5, 200)]:
        run_acc(device, acc_spec("sm_90a", dtype), dtype, rows, cols)
    for layout, shapes in ROW_SHAPES.items():
        for rows, cols in shapes:
            run_row(device, row_spec("sm_90a", layout), layout, rows, cols)
