"""kernel_sources/rms_norm.cuh: one source for gfx942, gfx950 and sm_90a.

* runs on sim:gfx942 and sim:gfx950 for every dtype and schedule (rows per warp, one row per
  wave/warps, one row per block with x read in column blocks, a persistent grid), ragged rows and
  hidden sizes, strided rows and in place, against a float64 NumPy reference, outputs NaN-poisoned;
* static checks of the configurations a caller would pick per row length: 0 spills on every
  target, 16-byte global loads in the AMD disassembly and in the PTX;
* the ctypes mirror of `args` matches the kernel's argument size in the AMD metadata.
"""
import ctypes
import functools
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from hkjit import cache, codeobj, compiler, jit, runtime, spec as spec_mod, static, targets
from hkjit.errors import CompilerNotFoundError

from conftest import HAVE_GPU, needs_clang, needs_nvrtc, needs_sass, sass

CPP = {"float32": "float", "bfloat16": "hk::bf16", "float16": "hk::half"}
NP = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16, "float16": np.float16}
# Relative error bound of y: fp32 math, one rounding to the output type (plus the fast rsqrt).
TOL = {"float32": 2e-5, "bfloat16": 1e-2, "float16": 2e-3}


class Args(ctypes.Structure):
    _fields_ = [("x", ctypes.c_void_p), ("weight", ctypes.c_void_p), ("y", ctypes.c_void_p),
                ("x_row_stride", ctypes.c_longlong), ("y_row_stride", ctypes.c_longlong),
                ("rows", ctypes.c_int), ("hidden", ctypes.c_int), ("eps", ctypes.c_float)]


# name -> (threads, row_threads, rows per group, chunks): the schedules, small enough for the
# simulator (64-thread multiples serve both warp sizes).
SCHEDULES = {
    "rows_per_warp": (64, 16, 2, 2),        # 4 row groups per wave, 2 rows each
    "row_per_wave": (128, 64, 1, 2),         # one row per AMD wave / per two NVIDIA warps
    "row_per_block": (256, 256, 1, 2),       # one row per block; hidden > 512 VEC: column blocks
}


def make_spec(target, dtype, vec, threads, row_threads, rows, chunks):
    return spec_mod.Specialization(
        "rms_norm", targets.parse(target), "rms_norm.cuh",
        f"rms_norm<{CPP[dtype]}, {vec}, {threads}, {row_threads}, {rows}, {chunks}>", "hkjit_rms_norm",
        spec_mod.make_params({"dtype": dtype, "vec": vec, "threads": threads, "row_threads": row_threads,
                              "rows": rows, "chunks": chunks}))


def widest_vec(dtype, *element_strides):
    """The largest VEC whose accesses stay aligned for rows starting at these element strides
    (base pointers are 256-byte aligned here)."""
    size = np.dtype(NP[dtype]).itemsize
    vec = 16 // size
    while any((s * size) % (vec * size) for s in element_strides):
        vec //= 2
    return vec


@pytest.fixture(scope="module")
def private_cache(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("HKJIT_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    cache.reset_default_cache()
    yield
    mp.undo()
    cache.reset_default_cache()


def reference(x, w, eps):
    x64 = x.astype(np.float64)
    return x64 / np.sqrt((x64 * x64).mean(axis=1, keepdims=True) + eps) * w.astype(np.float64)


def run(device, target, dtype, schedule, rows, hidden, x_stride, y_stride, grid=None, in_place=False):
    threads, row_threads, group_rows, chunks = SCHEDULES[schedule]
    vec = widest_vec(dtype, x_stride, y_stride)
    spec = make_spec(target, dtype, vec, threads, row_threads, group_rows, chunks)
    rng = np.random.default_rng()
    x = np.full((rows, x_stride), np.nan, NP[dtype])
    x[:, :hidden] = (rng.standard_normal((rows, hidden)) * rng.uniform(0.5, 4)).astype(NP[dtype])
    w = rng.uniform(-2, 2, hidden).astype(NP[dtype])
    y = x if in_place else np.full((rows, y_stride), np.nan, NP[dtype])
    eps = float(rng.uniform(1e-6, 1e-2))
    ref = reference(x[:, :hidden], w, eps)
    per_block = threads // row_threads * group_rows
    row_blocks = -(-rows // per_block)
    kernel = jit.load_spec(spec, device)
    px, pw = device.alloc(x.nbytes), device.alloc(w.nbytes)
    py = px if in_place else device.alloc(y.nbytes)
    try:
        device.copy_in(px, x.ctypes.data, x.nbytes)
        device.copy_in(pw, w.ctypes.data, w.nbytes)
        if not in_place:
            device.copy_in(py, y.ctypes.data, y.nbytes)
        kernel.launch((grid or row_blocks, 1, 1), (threads, 1, 1), 0,
                      Args(px, pw, py, x_stride, y_stride, rows, hidden, eps), 0)
        device.synchronize(0)
        out = np.empty_like(y)
        device.copy_out(out.ctypes.data, py, out.nbytes)
    finally:
        for p in {px, pw, py}:
            device.free(p)
    got = out[:, :hidden].astype(np.float64)
    assert np.isfinite(got).all(), "an element was never written"
    # relative (only products follow the sum): the floor covers outputs that round to subnormals
    err = np.max(np.abs(got - ref) / (np.abs(ref) + float(ml_dtypes.finfo(NP[dtype]).tiny)))
    assert err < TOL[dtype], f"relative error {err:.2e} (bound {TOL[dtype]:.0e}), vec={vec}"
    if not in_place:
        assert np.isnan(out[:, hidden:].astype(np.float32)).all(), "written past the end of a row"


# (schedule, dtype, rows, hidden, x_stride, y_stride): every dtype and schedule, rows 1/3/17,
# hidden 1/7/129/1000/4100, contiguous (vector width from the row length) and padded strides.
CASES = [
    ("rows_per_warp", "bfloat16", 17, 129, 144, 136),
    ("rows_per_warp", "float32", 3, 7, 7, 7),
    ("rows_per_warp", "float16", 17, 1000, 1000, 1000),
    ("rows_per_warp", "bfloat16", 1, 1, 1, 1),
    ("row_per_wave", "float16", 3, 129, 136, 152),
    ("row_per_wave", "bfloat16", 17, 7, 7, 7),
    ("row_per_wave", "float32", 1, 4100, 4100, 4104),
    ("row_per_block", "float32", 3, 1000, 1000, 1008),
    ("row_per_block", "bfloat16", 3, 4100, 4104, 4100),
    ("row_per_block", "float16", 1, 1, 8, 8),
]
SIM = [pytest.param("gfx942", marks=needs_clang), pytest.param("gfx950", marks=needs_clang)]


@pytest.mark.parametrize("arch", SIM)
@pytest.mark.parametrize("schedule,dtype,rows,hidden,x_stride,y_stride", CASES)
def test_simulated(private_cache, arch, schedule, dtype, rows, hidden, x_stride, y_stride):
    run(runtime.get("sim", arch), arch, dtype, schedule, rows, hidden, x_stride, y_stride)


@pytest.mark.parametrize("arch", SIM)
@pytest.mark.parametrize("schedule", ["rows_per_warp", "row_per_block"])
def test_simulated_persistent_and_in_place(private_cache, arch, schedule):
    """Two blocks stride over all row blocks; y is x."""
    run(runtime.get("sim", arch), arch, "bfloat16", schedule, 17 if schedule == "rows_per_warp" else 5, 200,
        200, 200, grid=2, in_place=True)


# What a caller picks per row length (16-byte accesses): name -> (dtype, vec, threads,
# row_threads, rows, chunks). x is read once up to threads * vec * chunks columns.
PRODUCTION = {
    "h128": ("bfloat16", 8, 256, 16, 2, 1),
    "h1024": ("bfloat16", 8, 256, 32, 1, 4),
    "h4096": ("float16", 8, 512, 128, 1, 4),
    "h8192": ("bfloat16", 8, 512, 256, 1, 4),
    "h65536": ("bfloat16", 8, 1024, 1024, 1, 8),
    "h65536_fp32": ("float32", 4, 1024, 1024, 1, 8),
}


@needs_clang
@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
@pytest.mark.parametrize("config", PRODUCTION)
def test_amd_static(private_cache, arch, config):
    dtype, vec, *sched = PRODUCTION[config]
    built = jit.build_spec(make_spec(arch, dtype, vec, *sched))
    info = codeobj.amd_kernel_info(built.code, "hkjit_rms_norm")
    assert info["vgpr_spills"] == 0 and info["sgpr_spills"] == 0 and info["scratch_bytes"] == 0
    assert info["kernarg_bytes"] >= ctypes.sizeof(Args)
    assert [a[".offset"] + a[".size"] for a in info["args"] if a[".value_kind"] == "by_value"] == [ctypes.sizeof(Args)]
    insts = static.amd_disassembly(built.code, arch)
    if insts is None:
        pytest.skip("llvm-objdump not installed")
    loads = {m for _, m, _, _ in insts if m.startswith(("global_load", "buffer_load", "flat_load"))}
    assert "global_load_dwordx4" in loads and not any(m.startswith("flat_") for m in loads)
    assert any(m == "global_store_dwordx4" for _, m, _, _ in insts)


@functools.lru_cache(maxsize=None)
def nvrtc_compile(dtype, vec, *sched):
    try:
        comp = compiler.find_compiler(targets.parse("sm_90a"), "nvrtc")
    except CompilerNotFoundError as e:
        pytest.skip(f"NVRTC not available: {e}")
    spec = make_spec("sm_90a", dtype, vec, *sched)
    return comp.compile(spec_mod.render(spec), Path("rms_norm_unit.cu"), spec.target,
                        [spec_mod.include_dir(), spec_mod.kernel_sources_dir()], spec.entry)


@needs_nvrtc
@pytest.mark.parametrize("config", PRODUCTION)
def test_nvrtc_static(config):
    dtype, vec, *sched = PRODUCTION[config]
    result = nvrtc_compile(dtype, vec, *sched)
    assert "hkjit_rms_norm" in codeobj.symbols(result.code)
    assert result.meta["spills"] == 0 and result.meta["stack_bytes"] == 0, result.log
    assert "ld.global.v4.b32" in result.ptx and "st.global.v4.b32" in result.ptx


@needs_nvrtc
@needs_sass
@pytest.mark.parametrize("config", ["h128", "h8192", "h65536_fp32"])
def test_sass_has_16_byte_accesses(config, tmp_path):
    text = sass(nvrtc_compile(*PRODUCTION[config]).code, tmp_path)
    assert "LDG.E.128" in text and "STG.E.128" in text


def test_args_layout_matches_the_documented_contract():
    offsets = [getattr(Args, f).offset for f, _ in Args._fields_]
    assert offsets == [0, 8, 16, 24, 32, 40, 44, 48] and ctypes.sizeof(Args) == 56


@pytest.mark.gpu
@pytest.mark.skipif(not HAVE_GPU, reason="no CUDA GPU here")
@pytest.mark.parametrize("schedule,dtype,rows,hidden,x_stride,y_stride", CASES)
def test_hopper(private_cache, schedule, dtype, rows, hidden, x_stride, y_stride):
    run(runtime.get("cuda", 0), "sm_90a", dtype, schedule, rows, hidden, x_stride, y_stride)
