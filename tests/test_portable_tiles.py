"""One kernel source, three targets: tests/kernels/tile_affine_exp2.cuh uses only the shared tile
interface and must compile for gfx942, gfx950 and sm_90a, and compute the same thing on both
simulated CDNA targets (and on a Hopper GPU where one is present)."""
import ctypes
from pathlib import Path

import numpy as np
import pytest

from hkjit import codeobj, jit, runtime, spec as spec_mod, targets

from conftest import HAVE_GPU, needs_clang, needs_nvrtc

KERNELS = Path(__file__).parent / "kernels"
GROUPS = 2


class Args(ctypes.Structure):
    _fields_ = [("x", ctypes.c_void_p), ("y", ctypes.c_void_p), ("rows", ctypes.c_int), ("cols", ctypes.c_int),
                ("s", ctypes.c_float), ("b", ctypes.c_float)]


@pytest.fixture
def portable(monkeypatch, cache_dir):
    monkeypatch.setattr(spec_mod, "kernel_sources_dir", lambda: KERNELS)

    def make(target):
        return spec_mod.Specialization("tile_affine_exp2", targets.parse(target), "tile_affine_exp2.cuh",
                                       f"tile_affine_exp2<float, {GROUPS}>", "hkjit_tile_affine_exp2",
                                       spec_mod.make_params({"dtype": "float32", "groups": GROUPS}))
    return make


@pytest.mark.parametrize("target", [pytest.param("gfx942", marks=needs_clang), pytest.param("gfx950", marks=needs_clang),
                                    pytest.param("sm_90a", marks=needs_nvrtc)])
def test_one_source_compiles_for_every_target(portable, target):
    built = jit.build_spec(portable(target))
    assert "hkjit_tile_affine_exp2" in codeobj.symbols(built.code) and built.meta["spills"] == 0


def _run(device, spec, rows, cols):
    rng = np.random.default_rng()
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    y = np.full_like(x, np.nan)
    s, b = float(rng.uniform(0.5, 1.5)), float(rng.uniform(-1, 1))
    kernel = jit.load_spec(spec, device)
    tiles = -(-rows // 64) * -(-cols // 64)
    px, py = device.alloc(x.nbytes), device.alloc(y.nbytes)
    try:
        device.copy_in(px, x.ctypes.data, x.nbytes)
        device.copy_in(py, y.ctypes.data, y.nbytes)
        kernel.launch((-(-tiles // GROUPS), 1, 1), (GROUPS * (128 if device.target.is_nvidia else 64), 1, 1), 0,
                      Args(px, py, rows, cols, s, b), 0)
        device.synchronize(0)
        device.copy_out(y.ctypes.data, py, y.nbytes)
    finally:
        device.free(px)
        device.free(py)
    ref = np.exp2(x.astype(np.float64) * s + b)
    assert np.isfinite(y).all(), "an element was never written"
    assert np.max(np.abs(y - ref) / np.abs(ref)) < 1e-5


@needs_clang
@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
@pytest.mark.parametrize("rows,cols", [(64, 64), (130, 77), (5, 200)])
def test_same_source_runs_on_both_simulated_targets(portable, arch, rows, cols):
    _run(runtime.get("sim", arch), portable(arch), rows, cols)


@pytest.mark.gpu
@pytest.mark.skipif(not HAVE_GPU, reason="no CUDA GPU here")
@pytest.mark.parametrize("rows,cols", [(64, 64), (130, 77), (5, 200)])
def test_same_source_runs_on_hopper(portable, rows, cols):
    _run(runtime.get("cuda", 0), portable("sm_90a"), rows, cols)
